"""A broker's own random secret, kept in a 0600 file and stable across restarts.

SCRAM answers an unknown user with a salt derived from this secret and the name
(:func:`~broker.security.scram_format.mock_credential`). If the secret changed at each start,
an observer could tell unknown users (whose salt changes) from real ones (whose salt stays).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from broker.security.errors import SecurityError
from store import write_atomically

SECRET_BYTES = 32


def load_or_create_secret(path: Path) -> bytes:
    """The secret in ``path``, created (32 random bytes, mode 0600, atomically) when missing.

    Raises :class:`SecurityError` for a file of the wrong size, or one others may read.
    """
    if not path.exists():

        def fill(temp: Path) -> None:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(secrets.token_bytes(SECRET_BYTES))

        write_atomically(path, fill, exclusive=True)  # a concurrent creator wins: read theirs
    if path.stat().st_mode & 0o077:
        raise SecurityError(f"{path} may be read by others: chmod 600 it")
    secret = path.read_bytes()
    if len(secret) != SECRET_BYTES:
        raise SecurityError(f"{path} is not a {SECRET_BYTES}-byte secret")
    return secret
