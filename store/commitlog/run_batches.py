"""DispatchBatches from scanned CommitLog bytes: how a run of valid records (found by
:func:`store.format.record_scan.validate_run`) becomes the columnar hand-off to the
ConsumeQueues and the index, its properties parsed vectorised.

The put path builds its DispatchBatches from the encoder's own arrays; this is the other
source, used by :meth:`CommitLog.scan <store.commitlog.commitlog.CommitLog.scan>` and the
recovery walk.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow.compute as pc

from store.commitlog.dispatch_batch import I32, I64, DispatchBatch
from store.format.arrow_ranges import ArrowStrings
from store.format.java_hash import java_string_hashes
from store.format.property_columns import decode_property_columns
from store.format.record_scan import RecordRun

#: ``tags_codes_for(topics, topic_codes, queue_ids, store_timestamps_ms, tags_hashes) -> codes``
#: for a whole DispatchBatch (the facade decides SCHEDULE_TOPIC_XXXX's deliver-time codes);
#: :func:`default_tags_codes` keeps the TAGS hashCodes.
TagsCodesFn = Callable[[tuple[str, ...], I32, I32, I64, I64], I64]


def default_tags_codes(
    topics: tuple[str, ...], topic_codes: I32, queue_ids: I32, store_timestamps_ms: I64, tags_hashes: I64
) -> I64:
    """The ConsumeQueue tagsCode of ordinary topics: Java ``TAGS.hashCode()``, 0 without tags."""
    return tags_hashes


def run_dispatch_batch(
    base: int, chunk: bytes, run: RecordRun, lo: int, hi: int, tags_codes_for: TagsCodesFn
) -> DispatchBatch:
    """Records ``lo:hi`` of a run as a DispatchBatch (properties parsed vectorised)."""
    uniq_col, tags_col, keys_col = decode_property_columns(
        np.frombuffer(chunk, dtype=np.uint8), run.properties_starts[lo:hi], run.properties_lengths[lo:hi]
    )
    used, topic_codes = np.unique(run.topic_codes[lo:hi], return_inverse=True)
    topics = tuple(run.topic_names[code] for code in used.tolist())
    store_ts = run.store_timestamps_ms[lo:hi]
    codes32: I32 = topic_codes.astype(np.int32).ravel()
    hashes = java_string_hashes(pc.fill_null(tags_col, "")).astype(np.int64)
    tags_codes = tags_codes_for(topics, codes32, run.queue_ids[lo:hi], store_ts, hashes)
    return DispatchBatch(
        commitlog_offsets=base + run.starts[lo:hi],
        sizes=run.sizes[lo:hi].astype(np.int32),
        tags_codes=tags_codes,
        queue_ids=run.queue_ids[lo:hi],
        queue_offsets=run.queue_offsets[lo:hi],
        store_timestamps_ms=store_ts,
        sys_flags=run.sys_flags[lo:hi],
        topic_codes=codes32,
        topics=topics,
        uniq_keys=ArrowStrings(uniq_col),
        keys=ArrowStrings(keys_col),
    )
