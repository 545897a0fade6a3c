"""Suite-wide: the order modules run in.

``make test`` runs the suite in two processes (pytest-xdist, ``--dist loadfile``): each module goes
whole to whichever process is free next, in collection order. A module of one 4-minute test
collected last would run alone at the end while the other process idles, so the heaviest modules
go first (longest first is a good schedule for jobs on two machines). ``make test`` passes
``--no-loadscope-reorder``, which keeps this order (xdist would otherwise put the modules with the
most tests first: the cheap ones).

A module's weight is the larger of its seconds in ``tests/durations.json`` (measured: ``make
durations`` rewrites it) and an estimate from its tests' markers, so a new module needs no entry:
a slow test (kill tests, failovers, the Spark jobs of ``sparkmq serve``) weighs most, a test with
a SparkSession next, a plain test least. Within a module the order does not change.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
#: ``make durations``: where this run writes each module's seconds (setup, call and teardown).
RECORD_ENV = "SPARKMQ_RECORD_DURATIONS"
#: Rough seconds of one test, by its heaviest marker.
WEIGHTS = (("slow", 60.0), ("spark_cluster", 60.0), ("cluster", 20.0), ("spark", 15.0))
PLAIN_WEIGHT = 0.5

_measured: defaultdict[str, float] = defaultdict(float)


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _estimate(item: pytest.Item) -> float:
    for marker, weight in WEIGHTS:
        if item.get_closest_marker(marker) is not None:
            return weight
    return PLAIN_WEIGHT


def _recorded() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    estimated: defaultdict[str, float] = defaultdict(float)
    for item in items:
        estimated[_module(item.nodeid)] += _estimate(item)
    recorded = _recorded()
    weight = {module: max(seconds, recorded.get(module, 0.0)) for module, seconds in estimated.items()}
    rank = {module: position for position, module in enumerate(estimated)}  # ties keep their order
    items.sort(key=lambda item: (-weight[_module(item.nodeid)], rank[_module(item.nodeid)]))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get(RECORD_ENV):
        _measured[_module(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get(RECORD_ENV)
    if target and _measured and not hasattr(session.config, "workerinput"):  # the xdist controller
        ordered = dict(sorted(((m, round(s, 1)) for m, s in _measured.items()), key=lambda kv: -kv[1]))
        Path(target).write_text(json.dumps(ordered, indent=1) + "\n")
