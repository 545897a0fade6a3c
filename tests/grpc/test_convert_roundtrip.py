"""Property: whatever a client may send comes back the same from a real store.

A ``v2.Message`` the door accepts (Hypothesis draws the user properties, tag, keys, body,
message group, trace context, born host/time and a delivery time already due) goes through
:func:`from_proto`, ``MessageStore.put_message``, a read, and :func:`to_proto`; every field the
client set must read back unchanged.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest_api.grpc.convert import from_proto, to_proto
from ingest_api.grpc.v2 import definition_pb2 as pb
from store import MessageStore
from store import vocabulary as v
from tests.support.stores import light_config

NOW_MS = 1_700_000_000_000
PEER = ("192.0.2.7", 50123)

#: Printable text: no control characters (the door refuses them), no surrogates.
text = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=24)
names = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.", min_size=1, max_size=16)
user_properties = st.dictionaries(names.filter(lambda n: n not in v.SYSTEM_PROPERTIES_V5), text, max_size=5)
tags = st.none() | text.filter(lambda t: "|" not in t and t.strip() == t)
keys = st.lists(text.filter(lambda k: " " not in k and k.strip() == k), max_size=3, unique=True)
groups = st.none() | text.filter(lambda g: g.strip() and len(g.encode()) < 64)


def stamp(ms: int) -> Timestamp:
    value = Timestamp()
    value.FromMilliseconds(ms)
    return value


@st.composite
def sent_messages(draw: st.DrawFn) -> pb.Message:
    system = pb.SystemProperties(
        message_id=draw(st.text("0123456789ABCDEF", min_size=34, max_size=34)),
        message_type=pb.NORMAL,
        keys=draw(keys),
        born_host=draw(st.sampled_from(["", "10.1.2.3", "host-a"])),
    )
    if (tag := draw(tags)) is not None:
        system.tag = tag
    if (group := draw(groups)) is not None:
        system.message_group = group
        system.message_type = pb.FIFO
    if draw(st.booleans()):
        system.trace_context = draw(text)
    if draw(st.booleans()):
        system.born_timestamp.CopyFrom(stamp(draw(st.integers(0, NOW_MS))))
    if draw(st.booleans()):  # due already: stored in the topic itself, not parked
        system.delivery_timestamp.CopyFrom(stamp(draw(st.integers(NOW_MS - 10**9, NOW_MS - 1))))
    return pb.Message(
        topic=pb.Resource(name="orders"),
        user_properties=draw(user_properties),
        system_properties=system,
        body=draw(st.binary(min_size=1, max_size=64)),
    )


@pytest.fixture(scope="module")
def store() -> Iterator[MessageStore]:
    with tempfile.TemporaryDirectory() as scratch, MessageStore.open(light_config(Path(scratch))) as opened:
        yield opened


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sent=sent_messages())
def test_what_a_client_sends_reads_back_unchanged(store: MessageStore, sent: pb.Message) -> None:
    put = store.put_message(from_proto(sent, peer=PEER, now_ms=NOW_MS))
    [view] = store.get_messages("orders", put.queue_id, put.queue_offset, 1).messages
    back = to_proto(view, now_ms=NOW_MS)
    system, sent_system = back.system_properties, sent.system_properties
    assert (back.topic.name, back.body) == ("orders", sent.body)
    assert system.message_id == sent_system.message_id
    assert system.HasField("tag") == bool(sent_system.tag) and system.tag == sent_system.tag
    assert list(system.keys) == list(sent_system.keys)
    assert system.message_group == sent_system.message_group
    assert system.trace_context == sent_system.trace_context
    assert system.born_host == (sent_system.born_host or f"{PEER[0]}:{PEER[1]}")
    if sent_system.HasField("born_timestamp"):
        assert system.born_timestamp == sent_system.born_timestamp
    assert system.delivery_timestamp == sent_system.delivery_timestamp
    expected_type = pb.DELAY if sent_system.HasField("delivery_timestamp") else sent_system.message_type
    assert system.message_type == expected_type
    assert system.body_digest.type == pb.MD5 and system.delivery_attempt == 1
    # as the proxy: the sharding key and trace context are not in RocketMQ 5's system set
    leaked = {
        v.PROPERTY_SHARDING_KEY: sent_system.message_group,
        v.PROPERTY_TRACE_CONTEXT: sent_system.trace_context,
    }
    assert dict(back.user_properties) == dict(sent.user_properties) | {k: x for k, x in leaked.items() if x}
