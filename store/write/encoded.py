"""Records encoded whole outside the put path, with what their dispatch needs.

The put path encodes records from messages; relocations (:mod:`store.write.relocate`) and
transaction ends (:mod:`store.write.transactions`) build them from records already stored.
:class:`EncodedRecords` carries such records to ``Appender.put_encoded``: the bytes (every
field final but queue offset, CommitLog offset and store timestamp, patched under the put
lock), and per record its topic, queue, ``TAGS`` (for the ConsumeQueue tagsCode) and
``KEYS`` / ``UNIQ_KEY`` (for the index), so nothing is decoded again to append them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from store.format.batch_encode import EncodedBatch
from store.format.record import RecordFields, encode_record
from store.format.vocabulary import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY
from store.write.relocate import Relocated


@dataclass(frozen=True, slots=True)
class EncodedRecords:
    """Record ``i`` is ``batch.record(i)``, bound for ``topics[i]`` / ``queue_ids[i]``."""

    batch: EncodedBatch
    topics: tuple[str, ...]
    queue_ids: npt.NDArray[np.int32]
    tags: tuple[str | None, ...]
    keys: tuple[str | None, ...]

    def __len__(self) -> int:
        return len(self.topics)

    @staticmethod
    def of_relocated(records: Sequence[Relocated]) -> EncodedRecords:
        uniq_keys = [r.properties.get(PROPERTY_UNIQ_KEY, "") for r in records]
        return EncodedRecords(
            EncodedBatch.from_records([r.data for r in records], uniq_keys),
            tuple(r.topic for r in records),
            np.fromiter((r.queue_id for r in records), dtype=np.int32, count=len(records)),
            tuple(r.properties.get(PROPERTY_TAGS) for r in records),
            tuple(r.properties.get(PROPERTY_KEYS) for r in records),
        )

    @staticmethod
    def of_batch(batch: EncodedBatch, topic: str, queue_id: int = 0) -> EncodedRecords:
        """Every record of ``batch`` bound for ``topic`` / ``queue_id``, without TAGS or KEYS."""
        n = len(batch)
        return EncodedRecords(
            batch, (topic,) * n, np.full(n, queue_id, dtype=np.int32), (None,) * n, (None,) * n
        )

    @staticmethod
    def of_fields(records: Sequence[RecordFields]) -> EncodedRecords:
        return EncodedRecords.of_relocated(
            [Relocated(encode_record(r), r.topic, r.queue_id, r.properties or {}) for r in records]
        )

    def take(self, order: npt.ArrayLike) -> EncodedRecords:
        """The records in ``order`` (indexes into these records; a copy)."""
        rows = np.asarray(order, dtype=np.int64).tolist()
        uniq_keys = list(self.batch.uniq_keys)
        batch = EncodedBatch.from_records(
            [self.batch.record(i) for i in rows], [uniq_keys[i] for i in rows] if uniq_keys else []
        )
        return EncodedRecords(
            batch,
            tuple(self.topics[i] for i in rows),
            self.queue_ids[rows].astype(np.int32),
            tuple(self.tags[i] for i in rows),
            tuple(self.keys[i] for i in rows),
        )

    @staticmethod
    def concat(parts: Sequence[EncodedRecords]) -> EncodedRecords:
        if len(parts) == 1:
            return parts[0]
        return EncodedRecords(
            EncodedBatch.concat([p.batch for p in parts]),
            tuple(t for p in parts for t in p.topics),
            np.concatenate([p.queue_ids for p in parts]).astype(np.int32),
            tuple(t for p in parts for t in p.tags),
            tuple(k for p in parts for k in p.keys),
        )
