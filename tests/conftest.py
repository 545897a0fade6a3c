"""The suite's scheduling across xdist workers (``make test``: ``-n 2 --dist loadfile``)."""

from __future__ import annotations

from typing import Any

import pytest

#: Test files that run several Spark jobs at once (tests/support/turns.py): scheduled as one
#: unit, so one worker runs them one after the other while the other worker goes on with the
#: rest, instead of one worker idling on the turns lock while the other holds it.
TAKE_TURNS = frozenset({"tests/cluster/test_operators_cluster.py", "tests/cluster/test_wheel_failover.py"})
TURNS_SCOPE = "several-spark-jobs"


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None  # xdist's own scheduler
    from xdist.scheduler import LoadFileScheduling

    class TurnsScheduling(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            scope: str = super()._split_scope(nodeid)
            return TURNS_SCOPE if scope in TAKE_TURNS else scope

    return TurnsScheduling(config, log)
