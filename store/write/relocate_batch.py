"""Deliveries of many parked records at once: :mod:`store.write.relocate`'s rebuild as byte edits.

A delivered level message differs from its parked record only in the topic and header fields
(operators.md §1.1), a delivered timer message also in two appended properties (§1.2)::

    parked (SCHEDULE_TOPIC_XXXX / rmq_sys_wheel_timer)   delivered
    QUEUEID            level - 1 / 0                     REAL_QID
    PREPARED_TX_OFFSET                                   0
    topic              the parked topic                  REAL_TOPIC
    properties         ...                               ... (a timer message: + TIMER_ENQUEUE_MS,
                                                         TIMER_DEQUEUE_MS)

so the delivered records of a whole chunk are spliced from the parked bytes
(:func:`~store.format.record_splice.splice_records`): the body, its CRC and the properties string
stay as they are; queue offset, CommitLog offset and store timestamp are patched at append. What
the splice cannot express goes through the scalar rebuild (:func:`~store.write.relocate.relocated_bytes`),
record by record, in place: rolls and send-backs, timer messages that carry
``TIMER_ENQUEUE_MS``/``TIMER_DEQUEUE_MS`` already, and chunks whose properties are not in the
canonical encoding. ``tests/operators/test_relocate_batch.py`` checks both paths give the same
bytes, and golden bytes pin the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from store.format.arrow_ranges import gather_ranges
from store.format.batch_encode import EncodedBatch, patch_be
from store.format.property_columns import decode_named_properties
from store.format.record import PREPARED_TX_OFFSET_POS, QUEUE_ID_POS, STORE_TIMESTAMP_POS
from store.format.record_check import RangeColumns, check_records, gather_headers, header_field
from store.format.record_splice import splice_records
from store.format.vocabulary import (
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_UNIQ_KEY,
)
from store.names import SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC
from store.write.encoded import EncodedRecords
from store.write.relocate import NotRelocatable, RelocationKind, relocated_bytes

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
_NAMES = (
    PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID, PROPERTY_UNIQ_KEY, PROPERTY_TAGS, PROPERTY_KEYS,
    PROPERTY_TIMER_OUT_MS, PROPERTY_TIMER_ENQUEUE_MS, PROPERTY_TIMER_DEQUEUE_MS,
)  # fmt: skip
_MAX_QUEUE_ID = 2**31 - 1


class ParkedRecords(NamedTuple):
    """Parked records back to back (``store.commitlog.gather``): record ``i`` is
    ``buffer[starts[i] : starts[i] + sizes[i]]``, stored at CommitLog ``commitlog_offsets[i]``,
    to be relocated as ``kinds[i]`` with ``enqueue_ms[i]`` / ``dequeue_ms[i]``."""

    buffer: U8
    starts: I64
    sizes: I64
    commitlog_offsets: I64
    kinds: npt.NDArray[np.int8]
    enqueue_ms: I64
    dequeue_ms: I64


class RelocatedRecords(NamedTuple):
    """The records to append, in request order (record ``j`` relocates ``rows[j]``; dropped
    requests have no record) and, per record, when it was due (0 for a roll or a send-back)."""

    records: EncodedRecords
    rows: I64
    due_ms: I64


def relocated_records(
    parked: ParkedRecords, *, level_delays_ms: Sequence[int], timer_precision_ms: int
) -> RelocatedRecords:
    """What relocating ``parked`` appends (see the module docstring).

    Raises :class:`NotRelocatable` (nothing is relocated) naming the first request whose record
    is not a parked one of its kind. A delayed half message is dropped, as RocketMQ does."""
    count = len(parked.starts)
    spans = check_records(parked.buffer, parked.starts)
    if spans.valid < count:
        offset = int(parked.commitlog_offsets[spans.valid])
        raise NotRelocatable(f"no valid record at CommitLog offset {offset}: {spans.verdict.reason}")
    r = spans.ranges
    source = pa.py_buffer(parked.buffer)
    topics = gather_ranges(source, r.topic_begin, r.topic_len, pa.binary())
    is_level = pc.equal(topics, pa.scalar(SCHEDULE_TOPIC.encode(), pa.binary())).to_numpy(
        zero_copy_only=False
    )
    is_timer = pc.equal(topics, pa.scalar(TIMER_TOPIC.encode(), pa.binary())).to_numpy(zero_copy_only=False)
    deliver = parked.kinds == RelocationKind.DELIVER
    _refuse(parked, deliver & ~(is_level | is_timer), "is not a parked message")
    named = decode_named_properties(parked.buffer, r.props_begin, r.props_len, _NAMES)
    props = named.values
    real_topic = props[PROPERTY_REAL_TOPIC]
    real_qid = _queue_ids(props[PROPERTY_REAL_QID])
    _refuse(parked, deliver & (~real_topic.is_valid().to_numpy(zero_copy_only=False) | (real_qid < 0)),
            "has no REAL_TOPIC/REAL_QID")  # fmt: skip
    half = pc.fill_null(pc.equal(real_topic, TRANS_HALF_TOPIC), False).to_numpy(zero_copy_only=False)
    stamped = props[PROPERTY_TIMER_ENQUEUE_MS].is_valid().to_numpy(zero_copy_only=False) | props[
        PROPERTY_TIMER_DEQUEUE_MS
    ].is_valid().to_numpy(zero_copy_only=False)
    keep = ~(deliver & half)
    spliced = deliver & ~half & (is_level | (is_timer & ~stamped & named.canonical))
    headers = gather_headers(parked.buffer, parked.starts)
    due = np.zeros(count, dtype=np.int64)
    delays = np.asarray(level_delays_ms, dtype=np.int64)
    level_queue = np.clip(header_field(headers, QUEUE_ID_POS).astype(np.int64), 0, len(delays) - 1)
    due[is_level] = header_field(headers, STORE_TIMESTAMP_POS)[is_level] + delays[level_queue[is_level]]
    timer_out = _naturals(props[PROPERTY_TIMER_OUT_MS], 18)
    due[is_timer] = np.maximum(timer_out[is_timer], 0) + timer_precision_ms
    due[~deliver] = 0
    rows = np.flatnonzero(keep)
    vector = np.flatnonzero(spliced)
    scalar = np.flatnonzero(keep & ~spliced)
    parts = []
    if len(vector):
        parts.append(_spliced(parked, spans.ranges, vector, props, real_qid, is_timer))
    if len(scalar):
        parts.append(_rebuilt(parked, scalar, len(delays)))
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return RelocatedRecords(EncodedRecords.of_relocated([]), empty, empty)
    records = _in_order(parts, vector, scalar)
    return RelocatedRecords(records, rows, due[rows])


def _refuse(parked: ParkedRecords, bad: npt.NDArray[np.bool_], what: str) -> None:
    if bool(bad.any()):
        offset = int(parked.commitlog_offsets[int(np.argmax(bad))])
        raise NotRelocatable(f"the record at CommitLog offset {offset} {what}")


def _queue_ids(values: pa.Array) -> I64:
    """REAL_QID as numbers; -1 where absent or not a non-negative Java int."""
    out = _naturals(values, 10)
    out[out > _MAX_QUEUE_ID] = -1
    return out


def _naturals(values: pa.Array, max_digits: int) -> I64:
    """Decimal strings of at most ``max_digits`` digits as numbers; -1 for anything else."""
    digits = pc.fill_null(pc.match_substring_regex(values, f"^[0-9]{{1,{max_digits}}}$"), False)
    numbers = pc.cast(pc.if_else(digits, values, "0"), pa.int64())
    return np.where(digits.to_numpy(zero_copy_only=False), numbers.to_numpy(), -1)


def _spliced(
    parked: ParkedRecords,
    ranges: RangeColumns,
    rows: I64,
    props: dict[str, pa.Array],
    real_qid: I64,
    is_timer: npt.NDArray[np.bool_],
) -> EncodedRecords:
    """The delivered records of ``rows`` by byte edits."""
    picked = RangeColumns(*(column[rows] for column in ranges))
    take = pa.array(rows)
    real_topic = props[PROPERTY_REAL_TOPIC].take(take)
    encoded = pc.dictionary_encode(real_topic)
    names = encoded.dictionary.to_pylist()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    appended = None
    timers = is_timer[rows]
    if bool(timers.any()):
        stamps = pc.binary_join_element_wise(
            f"{PROPERTY_TIMER_ENQUEUE_MS}\x01",
            pc.cast(pa.array(parked.enqueue_ms[rows]), pa.string()),
            f"\x02{PROPERTY_TIMER_DEQUEUE_MS}\x01",
            pc.cast(pa.array(parked.dequeue_ms[rows]), pa.string()),
            "\x02",
            "",
        )
        appended = pc.if_else(pa.array(timers), stamps, "").cast(pa.binary())
    out = splice_records(parked.buffer, parked.starts[rows], picked, codes, names, appended)
    patch_be(out.buffer, out.starts + QUEUE_ID_POS, real_qid[rows], 4)
    patch_be(out.buffer, out.starts + PREPARED_TX_OFFSET_POS, 0, 8)
    topics = np.asarray(names, dtype=object)[codes]
    uniform = int(out.sizes[0]) if len(out.sizes) and bool((out.sizes == out.sizes[0]).all()) else None
    uniq = props[PROPERTY_UNIQ_KEY].take(take).to_pylist()
    return EncodedRecords(
        EncodedBatch(out.buffer, out.starts, out.sizes.astype(np.int32), uniform, [u or "" for u in uniq]),
        tuple(topics.tolist()),
        real_qid[rows].astype(np.int32),
        tuple(props[PROPERTY_TAGS].take(take).to_pylist()),
        tuple(props[PROPERTY_KEYS].take(take).to_pylist()),
    )


def _rebuilt(parked: ParkedRecords, rows: I64, max_level: int) -> EncodedRecords:
    """The records of ``rows`` rebuilt one by one (:func:`relocated_bytes`)."""
    built = []
    for i in rows.tolist():
        start = int(parked.starts[i])
        raw = parked.buffer[start : start + int(parked.sizes[i])].tobytes()
        rebuilt = relocated_bytes(
            raw,
            RelocationKind(int(parked.kinds[i])),
            enqueue_ms=int(parked.enqueue_ms[i]),
            dequeue_ms=int(parked.dequeue_ms[i]),
            max_level=max_level,
        )
        if rebuilt is None:  # dropped rows were filtered before; a send-back never is
            raise NotRelocatable(
                f"the record at CommitLog offset {int(parked.commitlog_offsets[i])} was dropped"
            )
        built.append(rebuilt)
    return EncodedRecords.of_relocated(built)


def _in_order(parts: list[EncodedRecords], vector: I64, scalar: I64) -> EncodedRecords:
    """The parts' records merged back into request order."""
    if len(parts) == 1:
        return parts[0]
    merged = EncodedRecords.concat(parts)
    order = np.argsort(np.concatenate((vector, scalar)), kind="stable")
    return merged.take(order)
