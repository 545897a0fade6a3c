"""Small real disks for full-disk tests: a tmpfs of a few MiB mounted under the test's
directory (root only; :func:`small_disk` skips the test otherwise, saying why).

    with small_disk(tmp_path / "disk", 16) as disk:
        filler = disk / "filler"
        fill_file(filler, 4 << 20)        # space to give back later
        ...                               # fill the rest until the store refuses
        filler.unlink()                   # space returns

tmpfs is also the harshest full disk for mapped files: a page of a sparse file that is
touched through a mapping, even only read, must be allocated there and then, and a full
tmpfs answers with SIGBUS (see ``store.io.fs``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(mount_point: Path, size_mib: int) -> Iterator[Path]:
    """Mount a ``size_mib`` MiB tmpfs at ``mount_point`` for the block; unmounted after (lazily
    if a killed process still holds a file open). Skips the test without root or mount."""
    with tmpfs(mount_point, size_mib) as mounted:
        if isinstance(mounted, str):
            pytest.skip(mounted)
        yield mounted


@contextlib.contextmanager
def tmpfs(mount_point: Path, size_mib: int) -> Iterator[Path | str]:
    """:func:`small_disk` without pytest: yields the mount point, or why no tmpfs could be
    mounted there (not root, no mount(8), mount failed) for a caller that can do without."""
    if os.geteuid() != 0:
        yield "a full-disk test mounts a small tmpfs: needs root"
        return
    if shutil.which("mount") is None:
        yield "a full-disk test mounts a small tmpfs: no mount(8) here"
        return
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        yield f"cannot mount a tmpfs at {mount_point}: {mounted.stderr.strip()}"
        return
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, check=False)


def fill_file(path: Path, size_bytes: int) -> None:
    """Write ``size_bytes`` of real data (not a sparse file) to ``path``."""
    chunk = b"\xa5" * (1 << 20)
    with open(path, "wb") as out:
        left = size_bytes
        while left > 0:
            out.write(chunk[: min(left, len(chunk))])
            left -= min(left, len(chunk))


def fill_disk(directory: Path, name: str = "rest") -> int:
    """Write a file in ``directory`` until the disk is full; returns the bytes written."""
    written = 0
    chunk = b"\x5a" * 4096
    with open(directory / name, "wb", buffering=0) as out:
        while True:
            try:
                written += out.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return written


def free_bytes(directory: Path) -> int:
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize
