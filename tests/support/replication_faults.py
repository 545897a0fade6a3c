"""Fault injection for tests on a replicated store: a replica's acknowledgement that times out."""

from __future__ import annotations

from store import FlushSlaveTimeout


class AckTimesOut:
    """A replica's put-path hooks (``store.write.replication``) whose acknowledgements time out
    while ``armed``: what ``--replication sync`` answers when the slaves lag. The write is in
    the log, not acknowledged (``FLUSH_SLAVE_TIMEOUT``); the client sees REQUEST_TIMED_OUT."""

    def __init__(self) -> None:
        self.armed = 0
        self.timed_out = 0

    def check_writable(self) -> None:
        pass

    def appended(self, end_offset: int) -> None:
        pass

    def acknowledge(self, end_offset: int) -> None:
        if self.armed:
            self.armed -= 1
            self.timed_out += 1
            raise FlushSlaveTimeout("the in-sync replicas did not hold it in time", end_offset=end_offset)
