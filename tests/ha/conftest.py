"""Fixtures for replication tests: an in-process replica group on 127.0.0.1 (tests/support/replicas.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.replicas import Group


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    built = Group(tmp_path)
    yield built
    built.close()
