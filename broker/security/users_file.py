"""The users file on disk: load, write (atomic, mode 0600) and reload when it changes.

:class:`UsersFile` holds the current :class:`~broker.security.users.UserTable`; a door reads
``users_file.table`` per request. :meth:`UsersFile.reload_if_changed` is cheap when nothing
changed (one ``stat``), so a caller may poll it, call it from a SIGHUP handler
(``loop.add_signal_handler(signal.SIGHUP, ...)``: the caller wires the signal), or both. A
file that fails to parse leaves the old table in place and is reported as a value
(:class:`ReloadResult`), whose ``error`` names the field but never a secret or the contents.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from broker.security.errors import InvalidUsersFile
from broker.security.users import UserTable, dump_users, parse_users, revoked_users
from store import write_atomically

#: Mode of a written users file: owner read/write only.
USERS_FILE_MODE = 0o600


def parse_users_bytes(raw: bytes, source: str) -> UserTable:
    """Decode and validate; errors are raised outside any ``except`` so they keep no link to
    the decoder's exception (a ``JSONDecodeError`` holds the whole file in ``doc``)."""
    document, where = None, ""
    try:
        document = json.loads(raw)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
    except UnicodeDecodeError:
        where = "its encoding (not UTF-8)"
    if where:
        raise InvalidUsersFile(f"{source}: not valid JSON at {where}")
    error = ""
    try:
        return parse_users(document)
    except InvalidUsersFile as exc:
        error = str(exc)
    raise InvalidUsersFile(f"{source}: {error}")


def load_users(path: Path) -> UserTable:
    """Read and validate ``path``; raises :class:`InvalidUsersFile`."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InvalidUsersFile(f"cannot read users file {path}: {exc.strerror}") from None
    return parse_users_bytes(raw, str(path))


def write_users(path: Path, table: UserTable) -> None:
    """Replace ``path`` with ``table`` atomically; the file is created with mode 0600 (never
    readable by others, not even for a moment)."""
    data = (json.dumps(dump_users(table), indent=2) + "\n").encode("utf-8")

    def fill(temp: Path) -> None:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, USERS_FILE_MODE)
        with os.fdopen(fd, "wb") as out:
            out.write(data)

    write_atomically(path, fill)


class ReloadOutcome(enum.Enum):
    UNCHANGED = "unchanged"
    RELOADED = "reloaded"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class ReloadResult:
    """``revoked``: users removed or whose credentials changed (close their connections)."""

    outcome: ReloadOutcome
    users: int
    revoked: frozenset[str] = frozenset()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class _Seen:
    mtime_ns: int
    size: int
    digest: bytes = field(repr=False)


class UsersFile:
    """The users file and its current table; thread-safe reloads, lock-free reads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        raw, seen = self._read()
        self._table = parse_users_bytes(raw, str(path))
        self._seen = seen
        self._lock = threading.Lock()

    @property
    def table(self) -> UserTable:
        return self._table

    def reload_if_changed(self) -> ReloadResult:
        """Re-read the file if its mtime, size or content hash changed; keep the old table
        when the new content is invalid or the file cannot be read."""
        with self._lock:
            try:
                stat = self.path.stat()
            except OSError as exc:
                return self._rejected(f"cannot read users file {self.path}: {exc.strerror}")
            if (stat.st_mtime_ns, stat.st_size) == (self._seen.mtime_ns, self._seen.size):
                return ReloadResult(ReloadOutcome.UNCHANGED, len(self._table.users))
            try:
                raw, seen = self._read()
            except InvalidUsersFile as exc:
                return self._rejected(str(exc))
            if seen.digest == self._seen.digest:
                self._seen = seen
                return ReloadResult(ReloadOutcome.UNCHANGED, len(self._table.users))
            self._seen = seen  # a broken version is reported once, not at every poll
            try:
                table = parse_users_bytes(raw, str(self.path))
            except InvalidUsersFile as exc:
                return self._rejected(str(exc))
            old, self._table = self._table, table
            return ReloadResult(ReloadOutcome.RELOADED, len(table.users), revoked_users(old, table))

    def _rejected(self, error: str) -> ReloadResult:
        return ReloadResult(ReloadOutcome.REJECTED, len(self._table.users), error=error)

    def _read(self) -> tuple[bytes, _Seen]:
        try:
            with self.path.open("rb") as handle:
                stat = os.fstat(handle.fileno())
                raw = handle.read()
        except OSError as exc:
            raise InvalidUsersFile(f"cannot read users file {self.path}: {exc.strerror}") from None
        return raw, _Seen(stat.st_mtime_ns, stat.st_size, hashlib.sha256(raw).digest())
