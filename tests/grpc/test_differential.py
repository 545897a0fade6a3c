"""Our generated code against the official client's: the same bytes mean the same thing.

Messages converted by :func:`ingest_api.grpc.convert.to_proto` are serialized with our
generated modules and decoded in the official client's venv by its own
``Message.fromProtobuf`` (digest check included); the golden answers are parsed and
re-serialized by the client's own generated ``*_pb2``, which must give the same bytes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ingest_api.grpc.convert import to_proto
from ingest_api.grpc.v2 import definition_pb2 as pb
from store import MessageView
from tests.grpc import golden
from tests.support.rocketmq5 import run_client

NOW_MS = 1_700_000_000_000

CASES: list[tuple[MessageView, str | None]] = [
    (golden.STORED_VIEW, "h"),
    (
        dataclasses.replace(
            golden.STORED_VIEW,
            topic="orders",
            body=bytes(range(256)),
            reconsume_times=2,
            properties={
                "UNIQ_KEY": "01C0A8000100003A6B0B000000000001AA",
                "TAGS": "TagA",
                "KEYS": "order-1",
                "__SHARDINGKEY": "customer-7",
                "TIMER_DELIVER_MS": str(NOW_MS + 60_000),
                "city": "Zürich",
                "PGROUP": "orders",
            },
        ),
        "handle-2",
    ),
    (dataclasses.replace(golden.STORED_VIEW, properties={"TRAN_MSG": "true"}), None),
]


def expected(view: MessageView, handle: str | None) -> dict[str, Any]:
    props = view.properties
    system = ("UNIQ_KEY", "TAGS", "KEYS", "PGROUP", "TIMER_DELIVER_MS", "TRAN_MSG")
    user = {k: v for k, v in props.items() if k not in system}
    types = {"TRAN_MSG": pb.TRANSACTION, "TIMER_DELIVER_MS": pb.DELAY}
    kind = next((t for name, t in types.items() if name in props), pb.NORMAL)
    deliver = props.get("TIMER_DELIVER_MS")
    return {
        "topic": view.topic,
        "tag": props.get("TAGS"),
        "keys": sorted(props["KEYS"].split(" ")) if "KEYS" in props else [],
        "message_id": props.get("UNIQ_KEY", view.msg_id),
        "body_hex": view.body.hex(),
        "corrupted": False,
        "delivery_attempt": view.reconsume_times + 1,
        "properties": user,
        "message_group": props.get("__SHARDINGKEY"),
        # the client tests the Timestamp message for truth, which an unset one passes: 0
        "delivery_timestamp": int(deliver) if deliver else 0,
        "born_host": view.born_host[0],
        "born_timestamp": view.born_timestamp_ms,
        "receipt_handle": handle,
        "message_type": int(kind),
    }


def test_the_official_client_reads_our_messages_and_answers(rocketmq5: Path, tmp_path: Path) -> None:
    messages = [to_proto(view, now_ms=NOW_MS, receipt_handle=handle) for view, handle in CASES]
    vectors = {
        "Status": golden.STATUS_OK,
        "QueryRouteResponse": golden.QUERY_ROUTE_ONE_QUEUE,
        "ReceiveMessageResponse": golden.RECEIVED_MESSAGE,
        "TelemetryCommand": golden.SETTINGS_REPLY_PRODUCER,
    }
    argument = {
        "messages": [m.SerializeToString().hex() for m in messages],
        "golden": {name: wire.hex() for name, wire in vectors.items()},
    }
    lines = run_client("decode_messages.py", argument, home=tmp_path / "home")
    decoded = [line["message"] for line in lines if "message" in line]
    assert decoded == [expected(view, handle) for view, handle in CASES]
    reread = {line["golden"]["type"]: line["golden"] for line in lines if "golden" in line}
    assert set(reread) == set(vectors)
    for name, wire in vectors.items():
        assert reread[name]["hex"] == wire.hex(), f"{name} reads differently:\n{reread[name]['text']}"


def test_a_wrong_digest_is_caught_by_the_client(rocketmq5: Path, tmp_path: Path) -> None:
    message = to_proto(golden.STORED_VIEW, now_ms=NOW_MS)
    message.body = b"tampered"
    [line] = run_client("decode_messages.py", {"messages": [message.SerializeToString().hex()]}, tmp_path)
    assert line["message"]["corrupted"] is True
