"""Property-based run of the OpenAPI spec against a live broker: no input may cause a 5xx.

Every operation of ``/openapi.json`` gets schema-conforming (positive) and schema-violating
(negative) requests, a bounded number each so the run stays well under a minute.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from .conftest import RunningBroker

# Fuzzing every route takes over a minute: in `make test`, not in `make test-fast`.
pytestmark = pytest.mark.slow

#: Examples per operation and generation mode.
MAX_EXAMPLES = 20
#: Long-polls generated with large wait_ms would only make the run slow.
MAX_FUZZ_WAIT_MS = 50


def _check_operation(
    operation: schemathesis.APIOperation, mode: GenerationMode, base_url: str, **fixed: dict[str, str]
) -> None:
    @given(case=operation.as_strategy(generation_mode=mode, **fixed))
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: schemathesis.Case) -> None:
        if isinstance(case.query, dict) and isinstance(case.query.get("wait_ms"), int):
            case.query["wait_ms"] = min(case.query["wait_ms"], MAX_FUZZ_WAIT_MS)
        case.call_and_validate(base_url=base_url, checks=[not_a_server_error], timeout=30)

    run()


#: Short names the generator produces first: with data in them, fuzzed requests reach the store.
SEEDED_TOPICS = ("0", "00", "A", "a", "_", "-", "%", "|")


def test_openapi_fuzz_finds_no_server_errors(shared_broker: RunningBroker) -> None:
    with shared_broker.client() as http:
        for name in SEEDED_TOPICS:
            assert http.put(f"/topics/{name}", json={"queues": 2}).status_code == 201
            batch = {"messages": [{"body": f"m{i}", "keys": ["0"], "tags": "0"} for i in range(4)]}
            assert http.post(f"/topics/{name}/messages:batch", json=batch).status_code == 201
            http.put("/groups/0/offsets", json={"topic": name, "offsets": {"0": 1}})
    schema = schemathesis.openapi.from_url(f"{shared_broker.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15
    negated = 0
    for operation in operations:
        _check_operation(operation, GenerationMode.POSITIVE, shared_broker.url)
        try:
            _check_operation(operation, GenerationMode.NEGATIVE, shared_broker.url)
            negated += 1
        except Unsatisfiable:  # nothing to violate (e.g. no parameters and no body)
            pass
        if "{topic}" in operation.path:  # once more on a topic that exists and holds messages
            _check_operation(
                operation, GenerationMode.POSITIVE, shared_broker.url, path_parameters={"topic": "A"}
            )
    assert negated >= len(operations) - 3
