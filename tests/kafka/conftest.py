"""Shared fixtures for the Kafka gateway tests."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3.0 loads its JSON schemas with a deprecated importlib API (harmless).
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:kafka.protocol.schemas.load_json")
    config.addinivalue_line("filterwarnings", "ignore:.*open_text is deprecated:DeprecationWarning")
