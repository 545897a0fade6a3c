"""Which push consumer holds which auto-renewed delivery, so its termination can release them.

A push consumer receives with ``auto_renew`` (no invisible time of its own): its messages are
hidden for the door's 60 s while its handler runs. RocketMQ 5's proxy releases what a client
still holds when it says NotifyClientTermination (or expires), so the messages come back at once
instead of after their invisible time. :class:`HeldHandles` is that bookkeeping: receipt handle
-> (client id, group), kept while the delivery is live; an ack, a dead-letter or a change of
invisible time forgets (or moves) the handle; :meth:`HeldHandles.release` hands back a client's
handles. Event loop only (no lock); no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable


class HeldHandles:
    def __init__(self) -> None:
        self._owner: dict[str, tuple[str, str]] = {}
        self._by_client: dict[str, set[str]] = {}

    def hold(self, client_id: str, group: str, handles: Iterable[str]) -> None:
        held = self._by_client.setdefault(client_id, set())
        for handle in handles:
            self._owner[handle] = (client_id, group)
            held.add(handle)

    def forget(self, handles: Iterable[str]) -> None:
        for handle in handles:
            owner = self._owner.pop(handle, None)
            if owner is not None:
                held = self._by_client.get(owner[0])
                if held is not None:
                    held.discard(handle)
                    if not held:
                        del self._by_client[owner[0]]

    def replace(self, old: str, new: str) -> None:
        """A changed invisible time: the new handle is held by whoever held the old one."""
        owner = self._owner.get(old)
        self.forget([old])
        if owner is not None:
            self.hold(owner[0], owner[1], [new])

    def release(self, client_id: str) -> list[tuple[str, str]]:
        """Forget and return ``(group, handle)`` of every delivery ``client_id`` still holds."""
        handles = self._by_client.pop(client_id, set())
        released = []
        for handle in sorted(handles):
            owner = self._owner.pop(handle, None)
            if owner is not None:
                released.append((owner[1], handle))
        return released

    def __len__(self) -> int:
        return len(self._owner)
