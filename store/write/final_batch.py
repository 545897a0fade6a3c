"""Final messages of many halves at once: :func:`store.write.transactions.final_record`, vectorised.

A commit copies each half into its real topic (RocketMQ's ``endMessageTransaction``): the
stored bytes stay, except ::

    [header: TOTALSIZE MAGIC .. QUEUEID .. SYSFLAG .. PREPARED_TX_OFFSET BODYLEN][body]
    [topic length + "RMQ_SYS_TRANS_HALF_TOPIC"]   -> [topic length + REAL_TOPIC]
    [properties length + properties]               (copied whole)

TOTALSIZE and MAGIC follow the new topic's length, QUEUEID is ``REAL_QID``, the transaction
bits of SYSFLAG become COMMIT and PREPARED_TX_OFFSET the half's CommitLog offset; queue offset,
physical offset and store timestamp are zeroed (the append patches them). Halves written
together sit back to back in the CommitLog, so a commit of thousands of halves is a few
slices of one buffer: when the records share one layout (the usual Kafka batch) the copy is
three column blocks of a 2-D array, otherwise one gather. The dispatch columns (UNIQ_KEY,
TAGS, KEYS) come from the caller when the put knew them, else they are parsed vectorised as
CommitLog scans do. ``tests/store`` checks the result byte for byte against
:func:`~store.write.transactions.final_record`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from store.errors import StoreError
from store.format.batch_decode import decode_int_field
from store.format.batch_encode import EncodedBatch, patch_be
from store.format.property_columns import decode_property_columns
from store.format.record import (
    BODY_LEN_POS,
    BODY_POS,
    MAGIC_POS,
    MAGIC_V1,
    MAGIC_V2,
    PHYSICAL_OFFSET_POS,
    PREPARED_TX_OFFSET_POS,
    PROPS_LEN,
    QUEUE_ID_POS,
    QUEUE_OFFSET_POS,
    STORE_TIMESTAMP_POS,
    SYS_FLAG_POS,
    TOPIC_LEN_V1,
    TOPIC_LEN_V2,
    TOTAL_SIZE_POS,
    topic_length_prefix,
)
from store.format.vocabulary import SYSFLAG_TX_COMMIT, SYSFLAG_TX_MASK
from store.names import TRANS_HALF_TOPIC
from store.write.encoded import EncodedRecords

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
_HALF_TOPIC = np.frombuffer(TRANS_HALF_TOPIC.encode("ascii"), dtype=np.uint8)

#: Per record: UNIQ_KEY, KEYS, TAGS of the final message (as the put had them).
Dispatch = tuple[Sequence[str], Sequence[str | None] | None, Sequence[str | None] | None]


def final_records(
    buf: bytes,
    sizes: npt.ArrayLike,
    half_offsets: npt.ArrayLike,
    real_topic: str,
    real_queue_ids: npt.ArrayLike,
    dispatch: Dispatch | None = None,
) -> EncodedRecords:
    """The final messages of the halves ``buf`` holds back to back (``sizes`` bytes each, stored
    at CommitLog ``half_offsets``), all bound for ``real_topic`` (queues ``real_queue_ids``).

    Raises :class:`StoreError` when ``buf`` does not hold exactly such halves."""
    arr = np.frombuffer(buf, dtype=np.uint8)
    sizes64 = np.asarray(sizes, dtype=np.int64).reshape(-1)
    offsets = np.asarray(half_offsets, dtype=np.int64).reshape(-1)
    n = len(sizes64)
    if n == 0 or int(sizes64.sum()) != len(arr) or len(offsets) != n:
        raise StoreError(f"expected {n} halves in {len(arr)} bytes")
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(sizes64[:-1], out=starts[1:])
    layout = _halves_layout(arr, starts, sizes64)
    keep_head, tail_from, sys_flags = layout
    topic_bytes = real_topic.encode("utf-8")
    magic, prefix = topic_length_prefix(topic_bytes)
    topic_part = np.frombuffer(prefix.pack(len(topic_bytes)) + topic_bytes, dtype=np.uint8)
    new_sizes = keep_head + len(topic_part) + (sizes64 - tail_from)
    out = _splice(arr, starts, sizes64, keep_head, tail_from, topic_part, new_sizes)
    out_starts = np.zeros(n, dtype=np.int64)
    np.cumsum(new_sizes[:-1], out=out_starts[1:])
    queue_ids = np.broadcast_to(np.asarray(real_queue_ids, dtype=np.int32), (n,)).copy()
    for position, values, width in (
        (TOTAL_SIZE_POS, new_sizes, 4),
        (MAGIC_POS, magic - (1 << 32) if magic >= 1 << 31 else magic, 4),  # a Java int
        (QUEUE_ID_POS, queue_ids, 4),
        (QUEUE_OFFSET_POS, 0, 8),
        (PHYSICAL_OFFSET_POS, 0, 8),
        (SYS_FLAG_POS, (sys_flags & ~SYSFLAG_TX_MASK) | SYSFLAG_TX_COMMIT, 4),
        (STORE_TIMESTAMP_POS, 0, 8),
        (PREPARED_TX_OFFSET_POS, offsets, 8),
    ):
        patch_be(out, out_starts + position, values, width)
    uniq_keys, keys, tags = (
        dispatch if dispatch is not None else _parse_dispatch(arr, starts, sizes64, tail_from)
    )
    uniform = int(new_sizes[0]) if bool((new_sizes == new_sizes[0]).all()) else None
    return EncodedRecords(
        EncodedBatch(out, out_starts, new_sizes.astype(np.int32), uniform, list(uniq_keys)),
        (real_topic,) * n,
        queue_ids,
        (None,) * n if tags is None else tuple(tags),
        (None,) * n if keys is None else tuple(keys),
    )


def _halves_layout(arr: U8, starts: I64, sizes: I64) -> tuple[I64, I64, I64]:
    """``(bytes up to the topic, where the properties length starts, SYSFLAG)`` per record,
    after checking that each one is a half laid out as RocketMQ lays records out."""
    if not bool((decode_int_field(arr, starts, TOTAL_SIZE_POS).astype(np.int64) == sizes).all()):
        raise StoreError("a half's TOTALSIZE does not match its registered size")
    magics = decode_int_field(arr, starts, MAGIC_POS, ">u4")
    v2 = magics == MAGIC_V2
    if not bool((v2 | (magics == MAGIC_V1)).all()):
        raise StoreError("not a record: bad magic code")
    keep_head = BODY_POS + decode_int_field(arr, starts, BODY_LEN_POS).astype(np.int64)
    if not bool(((keep_head >= BODY_POS) & (keep_head + 4 <= sizes)).all()):
        raise StoreError("a half's body length does not fit the record")
    topic_len_at = starts + keep_head
    topic_lens = np.where(
        v2,
        decode_int_field(arr, np.where(v2, topic_len_at, 0), 0, ">u2"),
        decode_int_field(arr, topic_len_at, 0, ">u1"),
    ).astype(np.int64)
    prefix = np.where(v2, TOPIC_LEN_V2.size, TOPIC_LEN_V1.size)
    if not bool((topic_lens == len(_HALF_TOPIC)).all()):
        raise StoreError(f"not every record is in {TRANS_HALF_TOPIC}")
    names = arr[(topic_len_at + prefix)[:, None] + np.arange(len(_HALF_TOPIC))]
    if not bool((names == _HALF_TOPIC).all()):
        raise StoreError(f"not every record is in {TRANS_HALF_TOPIC}")
    tail_from = keep_head + prefix + topic_lens
    props_lens = decode_int_field(arr, starts + tail_from, 0, ">u2").astype(np.int64)
    if not bool((tail_from + PROPS_LEN.size + props_lens == sizes).all()):
        raise StoreError("a half's properties do not end where the record does")
    return keep_head, tail_from, decode_int_field(arr, starts, SYS_FLAG_POS).astype(np.int64)


def _parse_dispatch(arr: U8, starts: I64, sizes: I64, tail_from: I64) -> Dispatch:
    begins = starts + tail_from + PROPS_LEN.size
    uniq, tags, keys = decode_property_columns(arr, begins, starts + sizes - begins)
    return uniq.to_pylist(), [k or None for k in keys.to_pylist()], tags.to_pylist()


def _splice(
    arr: U8, starts: I64, sizes: I64, keep_head: I64, tail_from: I64, topic_part: U8, new_sizes: I64
) -> U8:
    """Each record's head, the new topic part, its tail: one buffer."""
    n = len(starts)
    same = (
        bool((sizes == sizes[0]).all())
        and bool((keep_head == keep_head[0]).all())
        and bool((tail_from == tail_from[0]).all())
    )
    if same:  # one layout: column blocks of a 2-D array
        size, head, tail = int(sizes[0]), int(keep_head[0]), int(tail_from[0])
        rows = arr[: n * size].reshape(n, size)
        out = np.empty((n, int(new_sizes[0])), dtype=np.uint8)
        out[:, :head] = rows[:, :head]
        out[:, head : head + len(topic_part)] = topic_part
        out[:, head + len(topic_part) :] = rows[:, tail:]
        return out.reshape(-1)
    source = np.concatenate((arr, topic_part))
    seg_src = np.stack((starts, np.full(n, len(arr)), starts + tail_from), axis=1).reshape(-1)
    seg_len = np.stack((keep_head, np.full(n, len(topic_part)), sizes - tail_from), axis=1).reshape(-1)
    seg_out = np.zeros(len(seg_len), dtype=np.int64)
    np.cumsum(seg_len[:-1], out=seg_out[1:])
    index = np.repeat(seg_src - seg_out, seg_len) + np.arange(int(seg_len.sum()), dtype=np.int64)
    spliced: U8 = source[index]
    return spliced
