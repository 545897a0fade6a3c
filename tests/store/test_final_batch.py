"""The vectorised commit (``store.write.final_batch``) against the record-by-record one
(``final_record``): the same bytes for every half, whatever the layout (one shape for all, or
mixed bodies, keys, tags and properties), the topic length (V1 or V2 magic) and whether the put
handed over the dispatch columns; and a buffer that is not the halves it claims is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import Message, MessageStore, StoreConfig
from store.errors import StoreError
from store.format.record import encode_record
from store.write.final_batch import final_records
from store.write.transactions import Half, final_record

LONG_TOPIC = "%RETRY%" + "g" * 140  # beyond 127 bytes: a V2 record


def halves(
    ms: MessageStore, topic: str, rows: list[tuple[bytes, str | None, str | None, dict[str, str]]]
) -> list[int]:
    results = ms.put_messages(
        [
            Message(
                topic=topic,
                body=body,
                keys=tuple(key.split()) if key else (),
                tags=tags,
                properties={**props, "PGROUP": "pg", "__transactionId__": "T"},
                queue_id=1,
                transaction_prepared=True,
            )
            for body, key, tags, props in rows
        ]
    )
    return [r.commitlog_offset for r in results]


def check(ms: MessageStore, offsets: list[int], topic: str, dispatch: bool) -> None:
    raws = [ms.read_record(o) or b"" for o in offsets]
    expected = [encode_record(final_record(Half(raw, o))) for raw, o in zip(raws, offsets, strict=True)]
    given_columns = None
    if dispatch:
        halves_ = [Half(raw, o) for raw, o in zip(raws, offsets, strict=True)]
        props = [h.fields.properties or {} for h in halves_]
        given_columns = (
            [p["UNIQ_KEY"] for p in props],
            [p.get("KEYS") for p in props],
            [p.get("TAGS") for p in props],
        )
    out = final_records(b"".join(raws), [len(r) for r in raws], offsets, topic, 1, given_columns)
    assert [out.batch.record(i) for i in range(len(out))] == expected
    props = [Half(raw, o).fields.properties or {} for raw, o in zip(raws, offsets, strict=True)]
    assert list(out.batch.uniq_keys) == [p["UNIQ_KEY"] for p in props]
    assert list(out.keys) == [p.get("KEYS") for p in props]
    assert list(out.tags) == [p.get("TAGS") for p in props]
    assert out.topics == (topic,) * len(offsets) and out.queue_ids.tolist() == [1] * len(offsets)


@pytest.fixture
def ms(tmp_path: Path) -> MessageStore:
    config = StoreConfig(
        store_dir=tmp_path / "s", commitlog_file_size_bytes=1 << 24, background_services=False
    )
    store = MessageStore.open(config)
    store.create_topic("orders", 4)
    store.create_topic(LONG_TOPIC, 4)
    yield store
    store.close()


@pytest.mark.parametrize("dispatch", [False, True])
@pytest.mark.parametrize("topic", ["orders", LONG_TOPIC])
def test_one_shape_for_all_halves_takes_the_block_copy_and_matches(
    ms: MessageStore, topic: str, dispatch: bool
) -> None:
    offsets = halves(ms, topic, [(b"x" * 100, None, None, {}) for _ in range(50)])
    check(ms, offsets, topic, dispatch)


rows = st.lists(
    st.tuples(
        st.binary(min_size=0, max_size=300),
        st.one_of(st.none(), st.sampled_from(["k1", "a b", "key-number-three"])),
        st.one_of(st.none(), st.sampled_from(["t", "paid"])),
        st.dictionaries(
            st.sampled_from(["h", "color", "x-long-name"]), st.text("abc", min_size=1, max_size=9), max_size=2
        ),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=rows, dispatch=st.booleans(), long_topic=st.booleans())
def test_mixed_layouts_match_record_by_record(
    ms: MessageStore,
    rows: list[tuple[bytes, str | None, str | None, dict[str, str]]],
    dispatch: bool,
    long_topic: bool,
) -> None:
    topic = LONG_TOPIC if long_topic else "orders"
    check(ms, halves(ms, topic, rows), topic, dispatch)


def test_a_buffer_that_is_not_those_halves_is_refused(ms: MessageStore) -> None:
    offsets = halves(ms, "orders", [(b"a", None, None, {}), (b"bb", None, None, {})])
    raws = [ms.read_record(o) or b"" for o in offsets]
    sizes = [len(r) for r in raws]
    with pytest.raises(StoreError):
        final_records(b"".join(raws), [sizes[0]], offsets[:1], "orders", 1)  # more bytes than halves
    with pytest.raises(StoreError):
        final_records(b"".join(raws), [sizes[0] + 1, sizes[1] - 1], offsets, "orders", 1)  # wrong sizes
    (plain,) = ms.put_messages([Message(topic="orders", body=b"plain", queue_id=0)])
    raw = ms.read_record(plain.commitlog_offset) or b""
    with pytest.raises(StoreError):
        final_records(raw, [len(raw)], [plain.commitlog_offset], "orders", np.int32(0))  # not a half
