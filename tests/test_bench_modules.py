"""Every benchmark script imports: `make bench` must not find one broken by a move elsewhere
(the benchmarks borrow the tests' broker helpers, and they run in no other test)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
MODULES = sorted(p.stem for p in BENCH.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("module", MODULES)
def test_benchmark_module_imports(module: str) -> None:
    loaded = importlib.import_module(f"bench.{module}")
    assert callable(getattr(loaded, "main", None)), f"bench/{module}.py has no main()"
