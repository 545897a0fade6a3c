"""What a put returns: :class:`~store.types.PutResult` per message, or one columnar
:class:`BatchPutResult` for a batch (no Python object per message until asked)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from store.format.ids import encode_msg_id
from store.types import MessageView, PutResult


@dataclass(frozen=True, slots=True)
class BatchPutResult:
    """Where a columnar batch landed: one entry per message, in input order."""

    topic: str
    queue_ids: npt.NDArray[np.int32]
    queue_offsets: npt.NDArray[np.int64]
    commitlog_offsets: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int32]
    uniq_keys: Sequence[str]
    store_timestamp_ms: int
    store_host: tuple[str, int]

    def __len__(self) -> int:
        return len(self.queue_ids)

    def msg_id(self, i: int) -> str:
        return encode_msg_id(self.store_host, int(self.commitlog_offsets[i]))

    def results(self, topics: Sequence[str] | None = None) -> list[PutResult]:
        """The same information as :class:`PutResult` objects (one Python object each);
        ``topics`` names each message's topic when the batch spans several."""
        names = [self.topic] * len(self) if topics is None else topics
        return [
            PutResult(
                msg_id=self.msg_id(i),
                uniq_key=self.uniq_keys[i],
                topic=names[i],
                queue_id=int(self.queue_ids[i]),
                queue_offset=int(self.queue_offsets[i]),
                commitlog_offset=int(self.commitlog_offsets[i]),
                store_timestamp_ms=self.store_timestamp_ms,
                size_bytes=int(self.sizes[i]),
            )
            for i in range(len(self))
        ]


def put_result_of(view: MessageView) -> PutResult:
    return PutResult(
        msg_id=view.msg_id,
        uniq_key=view.uniq_key or "",
        topic=view.topic,
        queue_id=view.queue_id,
        queue_offset=view.queue_offset,
        commitlog_offset=view.commitlog_offset,
        store_timestamp_ms=view.store_timestamp_ms,
        size_bytes=view.size_bytes,
    )


def batch_result_of(topic: str, results: Sequence[PutResult], store_host: tuple[str, int]) -> BatchPutResult:
    return BatchPutResult(
        topic,
        np.array([r.queue_id for r in results], dtype=np.int32),
        np.array([r.queue_offset for r in results], dtype=np.int64),
        np.array([r.commitlog_offset for r in results], dtype=np.int64),
        np.array([r.size_bytes for r in results], dtype=np.int32),
        [r.uniq_key for r in results],
        max(r.store_timestamp_ms for r in results),
        store_host,
    )
