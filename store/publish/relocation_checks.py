"""What a resumed relocation has already written: two checks on the CommitLog.

* :func:`stored_prefix` - a publish writes its requests in order, in atomic chunks, so the
  records relocated after its decision point are a *prefix* of its requests: one CommitLog scan
  from that point counts them (by topic and UNIQ_KEY, with multiplicity).
* :func:`not_relocated_before` - without an order to rely on (a decision an earlier master may
  have published, a wheel decision recovered after a crash): each parked record is looked up by
  its UNIQ_KEY in its target topic; one stored after the parked record is its relocation.

Relocated records keep the producer's UNIQ_KEY, so a record with the same topic and UNIQ_KEY
written by a producer after the parked one would be taken for its relocation (documented).
Failure modes: ``StoreError`` from the store (``IndexBehind`` when the key index lags).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from store.message_store import MessageStore
from store.write.relocator import RelocationPointers


def stored_prefix(store: MessageStore, pointers: RelocationPointers, after: int, chunk_rows: int) -> int:
    """How many leading requests of ``pointers`` are already relocated: records with their
    (topic, UNIQ_KEY) written after CommitLog offset ``after``, counted with multiplicity."""
    written = Counter(store.stored_identities(after))
    if not written:
        return 0
    for lo in range(0, len(pointers), chunk_rows):
        built = store.relocated_records(pointers.rows(lo, lo + chunk_rows))
        identities = zip(
            built.rows.tolist(), built.records.topics, built.records.batch.uniq_keys, strict=True
        )
        for row, topic, uniq in identities:
            identity = (topic, uniq or None)
            if written[identity] <= 0:
                return lo + int(row)
            written[identity] -= 1
    return len(pointers)


def not_relocated_before(
    store: MessageStore, pointers: RelocationPointers, bound: int, chunk_rows: int
) -> tuple[RelocationPointers, int]:
    """``(pointers less those already relocated, how many were)``, checking the records parked
    before CommitLog offset ``bound``: one key lookup each (the rest are kept unchecked)."""
    old = np.flatnonzero(pointers.commitlog_offsets < bound)
    if len(old) == 0:
        return pointers, 0
    keep = np.ones(len(pointers), dtype=np.bool_)
    for lo in range(0, len(old), chunk_rows):
        rows = old[lo : lo + chunk_rows]
        picked = pointers.take(rows)
        built = store.relocated_records(picked)
        identities = zip(
            built.rows.tolist(), built.records.topics, built.records.batch.uniq_keys, strict=True
        )
        for row, topic, uniq in identities:
            parked_at = int(picked.commitlog_offsets[row])
            if uniq and any(
                view.uniq_key == uniq and view.commitlog_offset > parked_at
                for view in store.query_by_key(topic, uniq, max_results=16)
            ):
                keep[rows[row]] = False
    return pointers.take(np.flatnonzero(keep)), int(len(keep) - keep.sum())
