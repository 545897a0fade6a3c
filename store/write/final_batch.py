"""Final messages of many halves at once: :func:`store.write.transactions.final_record`, vectorised.

A commit copies each half into its real topic (RocketMQ's ``endMessageTransaction``): the
stored bytes stay, except ::

    [header: TOTALSIZE MAGIC .. QUEUEID .. SYSFLAG .. PREPARED_TX_OFFSET BODYLEN][body]
    [topic length + "RMQ_SYS_TRANS_HALF_TOPIC"]   -> [topic length + REAL_TOPIC]
    [properties length + properties]               (copied whole)

TOTALSIZE and MAGIC follow the new topic's length, QUEUEID is ``REAL_QID``, the transaction
bits of SYSFLAG become COMMIT and PREPARED_TX_OFFSET the half's CommitLog offset; queue offset,
physical offset and store timestamp are zeroed (the append patches them). Halves written
together sit back to back in the CommitLog, so a commit of thousands of halves is one read and
one splice (:func:`~store.format.record_splice.splice_records`). The dispatch columns (UNIQ_KEY,
TAGS, KEYS: the final message is indexed under its half's keys) come from the caller when the
put knew them, else they are parsed from the halves, vectorised, with REAL_QID when the caller
does not know it. ``tests/store`` checks the result byte for byte against
:func:`~store.write.transactions.final_record`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from store.errors import StoreError
from store.format.arrow_ranges import gather_ranges
from store.format.batch_encode import EncodedBatch, patch_be
from store.format.property_columns import decode_named_properties
from store.format.record import (
    PHYSICAL_OFFSET_POS,
    PREPARED_TX_OFFSET_POS,
    QUEUE_ID_POS,
    QUEUE_OFFSET_POS,
    STORE_TIMESTAMP_POS,
    SYS_FLAG_POS,
)
from store.format.record_check import check_records, gather_headers, header_field
from store.format.record_splice import splice_records
from store.format.vocabulary import (
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SYSFLAG_TX_COMMIT,
    SYSFLAG_TX_MASK,
)
from store.names import TRANS_HALF_TOPIC
from store.write.encoded import EncodedRecords

#: ``real_queue_ids`` of a half whose REAL_QID the caller does not know (read from the half).
UNKNOWN_QUEUE = -1
_DISPATCH_NAMES = (PROPERTY_REAL_QID, PROPERTY_UNIQ_KEY, PROPERTY_KEYS, PROPERTY_TAGS)

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
    at CommitLog ``half_offsets``), all bound for ``real_topic``, queues ``real_queue_ids``
    (:data:`UNKNOWN_QUEUE` where the caller does not know it: read from the half's ``REAL_QID``).

    Raises :class:`StoreError` when ``buf`` does not hold exactly such halves."""
    arr = np.frombuffer(buf, dtype=np.uint8)
    sizes64 = np.asarray(sizes, dtype=np.int64).reshape(-1)
    offsets = np.asarray(half_offsets, dtype=np.int64).reshape(-1)
    n = len(sizes64)
    if n == 0 or int(sizes64.sum()) != len(arr) or len(offsets) != n:
        raise StoreError(f"expected {n} halves in {len(arr)} bytes")
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(sizes64[:-1], out=starts[1:])
    spans = check_records(arr, starts)
    if spans.valid < n or not bool((spans.total_size == sizes64).all()):
        raise StoreError(f"a half is not a record of its registered size ({spans.verdict.reason or 'size'})")
    r = spans.ranges
    names = gather_ranges(pa.py_buffer(arr), r.topic_begin, r.topic_len, pa.binary())
    if not bool(pc.all(pc.equal(names, pa.scalar(TRANS_HALF_TOPIC.encode(), pa.binary()))).as_py()):
        raise StoreError(f"not every record is in {TRANS_HALF_TOPIC}")
    queue_ids = np.broadcast_to(np.asarray(real_queue_ids, dtype=np.int64), (n,)).copy()
    named = decode_named_properties(arr, r.props_begin, r.props_len, _DISPATCH_NAMES)
    unknown = queue_ids < 0
    if bool(unknown.any()):
        stored = pc.cast(pc.fill_null(named.values[PROPERTY_REAL_QID], "-1"), pa.int64()).to_numpy()
        queue_ids[unknown] = stored[unknown]
        if bool((queue_ids < 0).any()):
            raise StoreError("a half without REAL_QID")
    out = splice_records(arr, starts, r, np.zeros(n, dtype=np.int32), [real_topic])
    headers = gather_headers(arr, starts)
    sys_flags = header_field(headers, SYS_FLAG_POS).astype(np.int64)
    for position, values, width in (
        (QUEUE_ID_POS, queue_ids, 4),
        (QUEUE_OFFSET_POS, 0, 8),
        (PHYSICAL_OFFSET_POS, 0, 8),
        (SYS_FLAG_POS, (sys_flags & ~SYSFLAG_TX_MASK) | SYSFLAG_TX_COMMIT, 4),
        (STORE_TIMESTAMP_POS, 0, 8),
        (PREPARED_TX_OFFSET_POS, offsets, 8),
    ):
        patch_be(out.buffer, out.starts + position, values, width)
    if dispatch is not None:
        uniq_keys, keys, tags = dispatch
    else:  # the halves' own: the index keys of a final message are its half's, in its topic
        uniq_keys = named.values[PROPERTY_UNIQ_KEY].to_pylist()
        keys = [k or None for k in named.values[PROPERTY_KEYS].to_pylist()]
        tags = named.values[PROPERTY_TAGS].to_pylist()
    new_sizes = out.sizes
    uniform = int(new_sizes[0]) if bool((new_sizes == new_sizes[0]).all()) else None
    return EncodedRecords(
        EncodedBatch(out.buffer, out.starts, new_sizes.astype(np.int32), uniform, list(uniq_keys)),
        (real_topic,) * n,
        queue_ids.astype(np.int32),
        (None,) * n if tags is None else tuple(tags),
        (None,) * n if keys is None else tuple(keys),
    )
