"""The exactly-once sink's staged parts and decisions as CommitLog records (replica groups).

:class:`~store.publish.sink_staging.SinkStaging` keeps parts and decisions as files under the
store directory; a replica group's slaves receive only the CommitLog. So a replicated store
also writes them here, in ``rmq_sys_sink_staging`` (queue 0), where replication carries them
under the same acks as messages, and a member promoted by a failover finds them:

* a staged part: its Arrow IPC bytes cut in pieces of at most :data:`PIECE_BYTES`, all in one
  atomic append, piece ``i`` with the UNIQ_KEY ``sink:<sink>:<batch>:part:<part>:<i>`` and the
  property ``SINK_PIECES`` (how many);
* a decision: the manifest's JSON (``COMMIT.json``) with the UNIQ_KEY
  ``sink:<sink>:<batch>:decision``. It is acknowledged before anything of the batch is
  published. If the log holds two (an append whose acknowledgement failed, then its retry),
  they are the same manifest; the first in the log is read.

Records are found again through the key index; retention removes them with the log.
"""

from __future__ import annotations

import json

from store.format.record import RecordFields
from store.message_store import MessageStore
from store.names import SINK_STAGING_TOPIC
from store.publish.sink_parts import Manifest
from store.types import MessageView

#: Largest piece of a part per record (well under the default 4 MiB message limit).
PIECE_BYTES = 1 << 20
PIECES_PROPERTY = "SINK_PIECES"
_QUEUE = 0


def part_key(sink_id: str, batch_id: int, part_id: str, piece: int) -> str:
    return f"sink:{sink_id}:{batch_id}:part:{part_id}:{piece}"


def decision_key(sink_id: str, batch_id: int) -> str:
    return f"sink:{sink_id}:{batch_id}:decision"


class SinkLog:
    """Parts and decisions of one replicated store's sinks, in its CommitLog."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.piece_bytes = min(PIECE_BYTES, store.config.max_message_size_bytes // 2)

    def _record(self, body: bytes, uniq_key: str, properties: dict[str, str] | None = None) -> RecordFields:
        host = (self.store.config.store_host, self.store.config.store_port)
        return RecordFields(
            topic=SINK_STAGING_TOPIC,
            body=body,
            queue_id=_QUEUE,
            properties={**(properties or {}), "UNIQ_KEY": uniq_key},
            born_timestamp_ms=self.store.now_ms(),
            born_host=host,
            store_host=host,
        )

    def put_part(self, sink_id: str, batch_id: int, part_id: str, payload: bytes) -> None:
        """Store a staged part's bytes (one atomic append; raises the store's errors)."""
        step = self.piece_bytes
        pieces = [payload[i : i + step] for i in range(0, len(payload), step)] or [b""]
        count = {PIECES_PROPERTY: str(len(pieces))}
        self._append(
            [
                self._record(piece, part_key(sink_id, batch_id, part_id, i), count)
                for i, piece in enumerate(pieces)
            ]
        )

    def _append(self, records: list[RecordFields]) -> None:
        """Append; a member that is not the master refuses (``NotMaster``, retriable: only the
        group's master stages and decides, so a commit never meets a part staged elsewhere)."""
        self.store.append_records(records)

    def read_part(self, sink_id: str, batch_id: int, part_id: str) -> bytes | None:
        """A staged part's bytes as stored by :meth:`put_part` (None when not in the log)."""
        first = self._first(part_key(sink_id, batch_id, part_id, 0))
        if first is None:
            return None
        count = int(first.properties.get(PIECES_PROPERTY, "1"))
        pieces = [first.body]
        for i in range(1, count):
            piece = self._first(part_key(sink_id, batch_id, part_id, i))
            if piece is None:  # an append is whole or absent: a piece lost is retention's doing
                return None
            pieces.append(piece.body)
        return b"".join(pieces)

    def put_decision(self, manifest: Manifest) -> None:
        """Store a batch's decision (raises the store's errors: nothing of the batch may be
        published then)."""
        body = json.dumps(manifest.to_json(), sort_keys=True).encode("utf-8")
        self._append([self._record(body, decision_key(manifest.sink_id, manifest.batch_id))])

    def decision(self, sink_id: str, batch_id: int) -> Manifest | None:
        """The batch's decision as the log holds it (the first one), None when absent."""
        found = self._first(decision_key(sink_id, batch_id))
        return None if found is None else Manifest.from_json(json.loads(found.body))

    def _first(self, uniq_key: str) -> MessageView | None:
        hits = [m for m in self.store.query_by_key(SINK_STAGING_TOPIC, uniq_key) if m.uniq_key == uniq_key]
        return min(hits, key=lambda m: m.commitlog_offset) if hits else None
