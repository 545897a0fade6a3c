"""The facade's consumer-group role: committed offsets (records of ``rmq_sys_CONSUMER_OFFSETS``,
:mod:`store.write.offset_log`), the offsets a committed transaction
carries, lag, and the delay resolver's progress (``config/consumerOffset.json`` and
``config/delayOffset.json``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from store.errors import InvalidArgument, UnknownQueue
from store.facade.base import FacadeState
from store.format.offset_record import OffsetCommand, OffsetKind
from store.names import validate_group
from store.write.encoded import EncodedRecords
from store.write.transactions import TxOffsets

log = logging.getLogger("sparkmq.store")


class Groups(FacadeState):
    """Consumer offsets and lag (a role of :class:`~store.message_store.MessageStore`)."""

    # ------------------------------------------------------------------ consumer offsets
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.commit_offsets(group, topic, {queue_id: offset})

    def commit_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Commit the next offsets ``group`` consumes from ``topic``'s queues: one
        ``rmq_sys_CONSUMER_OFFSETS`` record through the put path, acknowledged as a message is
        (a replicated store: after the in-sync slaves have it; raises what a produce raises,
        ``NotMaster`` on a slave). The table changes when the record is dispatched
        (:mod:`store.write.offset_log`). Raises UnknownTopic / UnknownQueue /
        InvalidArgument for bad input, nothing written."""
        self._ensure_open()
        validate_group(group)
        count = self.queue_count(topic)
        for queue_id, offset in offsets.items():
            if not 0 <= int(queue_id) < count:
                raise UnknownQueue(f"queue {queue_id} does not exist: topic {topic!r} has {count} queues")
            if int(offset) < 0:
                raise InvalidArgument(f"offset must be >= 0, got {offset} for queue {queue_id}")
        queues = {int(q): int(o) for q, o in offsets.items()}
        self._append_offset_commands([OffsetCommand(OffsetKind.COMMIT, group, topic, queues)])

    def _append_offset_commands(self, commands: Sequence[OffsetCommand]) -> None:
        """Append one offset record per command, in one atomic append."""
        now = self._clock()
        records = [self._offset_log.record(command, now) for command in commands]
        self._appender.put_encoded(EncodedRecords.of_fields(records))

    @property
    def transaction_offsets_applied(self) -> int:
        """First ``rmq_sys_trans_offsets`` queue offset whose offsets are not applied yet."""
        return self._offsets.transaction_offsets_applied

    def apply_transaction_offsets(self, position: int, entry: TxOffsets) -> bool:
        """Apply the offsets record of a committed transaction found at ``rmq_sys_trans_offsets``
        queue offset ``position`` (records in queue order; one below the watermark was applied
        before and is skipped: returns False). Queues that no longer exist are left out, logged.
        The store applies these records itself when it dispatches them (in log order with the
        plain commits, :mod:`store.write.offset_log`), so a call after the append finds the
        record applied and returns False; it stays for callers that replay the topic."""
        self._ensure_open()
        kept: dict[str, dict[int, int]] = {}
        for topic, offsets in entry.offsets.items():
            config = self._topics.get(topic)
            count = config.queues if config is not None else 0
            for queue_id, offset in offsets.items():
                if 0 <= queue_id < count and offset >= 0:
                    kept.setdefault(topic, {})[queue_id] = offset
                else:
                    log.warning(
                        "transaction offsets of group %s: %s queue %d (offset %d) no longer exists",
                        entry.group,
                        topic,
                        queue_id,
                        offset,
                    )
        return self._offsets.apply_transaction(position, entry.group, kept)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        return self._offsets.query(group, topic, queue_id)

    def committed_offsets(self, group: str, topic: str) -> dict[int, int]:
        return self._offsets.offsets(group, topic)

    def groups(self) -> dict[str, list[str]]:
        return self._offsets.groups()

    def delete_group_offsets(self, group: str, topic: str | None = None) -> int:
        """Forget ``group``'s offsets for ``topic`` (every topic when None) by an offset
        record (acknowledged as a commit is); returns the number of topics forgotten."""
        self._ensure_open()
        validate_group(group)
        topics = self._offsets.groups().get(group, [])
        doomed = len(topics) if topic is None else int(topic in topics)
        if doomed:
            command = (
                OffsetCommand(OffsetKind.DELETE_GROUP, group)
                if topic is None
                else OffsetCommand(OffsetKind.DELETE, group, topic)
            )
            self._append_offset_commands([command])
        return doomed

    def lag(self, group: str, topic: str) -> dict[int, int]:
        """Per queue: max offset - committed offset (an uncommitted queue counts from its min)."""
        committed = self._offsets.offsets(group, topic)
        result = {}
        for queue_id, (lo, hi) in self.queue_offsets(topic).items():
            result[queue_id] = max(0, hi - max(committed.get(queue_id, lo), lo))
        return result

    def delay_offsets(self) -> dict[int, int]:
        """``config/delayOffset.json``: level -> next ``SCHEDULE_TOPIC_XXXX`` queue ``level-1``
        offset to examine (every offset below it has been delivered)."""
        return self._delay_offsets.levels()

    def set_delay_offsets(self, offsets: Mapping[int, int]) -> None:
        """Mirror the delay resolver's progress (persisted with the other offset tables)."""
        for level, offset in offsets.items():
            self._delay_offsets.set(level, offset)
