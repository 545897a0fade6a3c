"""``DispatchBatch``: the columnar hand-off from the CommitLog to its derived structures.

Both the put path (from the encoder's own arrays, no re-parse) and recovery/catch-up (by
scanning CommitLog bytes) describe consecutive CommitLog records as one ``DispatchBatch``;
the ConsumeQueue and IndexFile builders consume it. One entry per message, all arrays of
equal length ``n``, in CommitLog order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from store.format.arrow_ranges import ArrowStrings

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


def string_array(values: Sequence[str | None]) -> pa.Array:
    """``values`` as an Arrow string array (the wrapped one for :class:`ArrowStrings`)."""
    return values.array if isinstance(values, ArrowStrings) else pa.array(values, type=pa.string())


@dataclass(frozen=True, slots=True)
class DispatchBatch:
    #: Absolute CommitLog offset of each record.
    commitlog_offsets: I64
    #: TOTALSIZE of each record.
    sizes: I32
    #: ConsumeQueue tagsCode: Java String.hashCode of TAGS (0 without tags); deliver
    #: timestamp (ms) for SCHEDULE_TOPIC_XXXX.
    tags_codes: I64
    queue_ids: I32
    queue_offsets: I64
    store_timestamps_ms: I64
    sys_flags: I32
    #: Index into ``topics`` for each record (dictionary encoding of the topic column).
    topic_codes: I32
    topics: tuple[str, ...]
    #: Raw ``UNIQ_KEY`` property per record (None when absent).
    uniq_keys: Sequence[str | None]
    #: Raw ``KEYS`` property per record (space-separated tokens; None when absent).
    keys: Sequence[str | None]

    def __len__(self) -> int:
        return len(self.commitlog_offsets)

    @property
    def end_offset(self) -> int:
        """CommitLog offset just after the last record (0 for an empty batch)."""
        if len(self) == 0:
            return 0
        return int(self.commitlog_offsets[-1]) + int(self.sizes[-1])

    @staticmethod
    def concat(batches: Sequence[DispatchBatch]) -> DispatchBatch:
        """One batch holding ``batches`` in order (topic codes re-mapped to one dictionary)."""
        if len(batches) == 1:
            return batches[0]
        if not batches:
            return DispatchBatch.empty()
        names: dict[str, int] = {}
        codes = []
        for batch in batches:
            remap = np.array([names.setdefault(t, len(names)) for t in batch.topics], dtype=np.int32)
            codes.append(remap[batch.topic_codes] if len(batch) else batch.topic_codes)
        return DispatchBatch(
            np.concatenate([b.commitlog_offsets for b in batches]),
            np.concatenate([b.sizes for b in batches]),
            np.concatenate([b.tags_codes for b in batches]),
            np.concatenate([b.queue_ids for b in batches]),
            np.concatenate([b.queue_offsets for b in batches]),
            np.concatenate([b.store_timestamps_ms for b in batches]),
            np.concatenate([b.sys_flags for b in batches]),
            np.concatenate(codes).astype(np.int32),
            tuple(names),
            tuple(k for b in batches for k in b.uniq_keys),
            tuple(k for b in batches for k in b.keys),
        )

    @staticmethod
    def empty() -> DispatchBatch:
        z64 = np.zeros(0, dtype=np.int64)
        z32 = np.zeros(0, dtype=np.int32)
        return DispatchBatch(z64, z32, z64, z32, z64, z64, z32, z32, (), (), ())
