"""Fixtures of the gRPC door's tests: the official RocketMQ 5 client's own venv."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.rocketmq5 import venv_python


@pytest.fixture(scope="session")
def rocketmq5() -> Path:
    """The interpreter of the venv that holds ``rocketmq-python-client`` (built once)."""
    return venv_python()
