"""What ``/openapi.json`` says, checked against the broker's configuration and its rules.

(Whether the server keeps it is ``test_api_schemathesis.py``'s job.)
"""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from broker.transactions import CHECK_URL_PATTERN
from ingest_api.http.schema_rules import AtMostOne, ExactlyOne, Excludes, GivenWhen, Rule
from sparkmq.cli import app as cli
from store import GROUP_NAME_PATTERN, SYSTEM_TOPICS, TOPIC_NAME_PATTERN

from .conftest import BrokerFactory

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


def test_docs_openapi_json_is_what_a_default_broker_serves(client: httpx.Client) -> None:
    served = client.get("/openapi.json").json()
    assert served == json.loads(DOCUMENT.read_text(encoding="utf-8")), (
        "docs/openapi.json is stale: regenerate it with `sparkmq openapi --output docs/openapi.json`"
    )


def test_sparkmq_openapi_prints_the_served_document(client: httpx.Client) -> None:
    printed = CliRunner().invoke(cli, ["openapi"])
    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.output) == client.get("/openapi.json").json()
    with_auth = CliRunner().invoke(cli, ["openapi", "--auth", "--internal", "--max-batch", "5"])
    document = json.loads(with_auth.output)
    assert document["security"] == [{"bearerAuth": []}]
    assert document["components"]["schemas"]["ProduceBatchIn"]["properties"]["messages"]["maxItems"] == 5
    assert "/sinks/{sink_id}" in document["paths"]


def test_security_is_optional_without_auth_and_required_with_it(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    auth_file = tmp_path / "tokens.json"
    auth_file.write_text(json.dumps({"tokens": [{"token": "t0ken-admin", "admin": ["*"]}]}))
    off = broker_factory().client().get("/openapi.json").json()
    on = broker_factory(auth_file=auth_file).client(token="t0ken-admin").get("/openapi.json").json()
    assert off["security"] == [{}, {"bearerAuth": []}]
    assert on["security"] == [{"bearerAuth": []}]
    for document in (off, on):
        assert document["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
        assert document["paths"]["/healthz"]["get"]["security"] == []
        for path, method, operation in operations(document):
            names = {p["name"].lower() for p in operation.get("parameters", [])}
            assert "authorization" not in names, (path, method)
    for path, method, operation in operations(on):
        needs_token = path != "/healthz"
        assert ("401" in operation["responses"]) == needs_token, (path, method)
        if needs_token:
            assert operation["responses"]["401"]["headers"]["WWW-Authenticate"]["required"] is True
    assert not any("401" in op["responses"] for _, _, op in operations(off))


def test_every_error_answer_is_the_one_error_body(client: httpx.Client) -> None:
    document = client.get("/openapi.json?internal=true").json()
    error = document["components"]["schemas"]["ErrorOut"]
    assert error["required"] == ["error", "message"]
    assert {"index", "field", "detail", "retriable"} <= set(error["properties"])
    for path, method, operation in operations(document):
        statuses = {int(status) for status in operation["responses"]}
        assert 503 in statuses, (path, method)  # every route reads the store: its faults
        for status, response in operation["responses"].items():
            if int(status) >= 400:
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorOut"}, (path, method, status)
        if operation.get("parameters") or "requestBody" in operation:
            assert {400, 422} <= statuses, (path, method)
        if "requestBody" in operation:
            assert 413 in statuses, (path, method)
    assert "HTTPValidationError" not in document["components"]["schemas"]


def test_internal_operations_are_left_out_unless_asked_for(client: httpx.Client) -> None:
    public = client.get("/openapi.json").json()
    full = client.get("/openapi.json", params={"internal": "true"}).json()
    internal = {(path, method) for path, method, op in operations(full) if op.get("x-internal")}
    assert internal == {
        ("/sinks/{sink_id}/batches/{batch_id}/parts/{part_id}", "put"),
        ("/sinks/{sink_id}/batches/{batch_id}:commit", "post"),
        ("/sinks/{sink_id}/batches/{batch_id}:abort", "post"),
        ("/sinks/{sink_id}", "get"),
        ("/sinks/{sink_id}/batches/{batch_id}/chunks/{seq}", "put"),  # broker to broker (a cluster)
        ("/operators/settings", "get"),
        ("/operators/{operator}/batches/{batch_id}", "post"),
        ("/operators/{operator}/status", "put"),
    }
    assert all("internal" in full["paths"][path][method]["tags"] for path, method in internal)
    assert not internal & {(path, method) for path, method, _ in operations(public)}
    assert {(p, m) for p, m, _ in operations(public)} | internal == {(p, m) for p, m, _ in operations(full)}
    assert "CommitIn" in full["components"]["schemas"] and "CommitIn" not in public["components"]["schemas"]
    part = full["paths"]["/sinks/{sink_id}/batches/{batch_id}/parts/{part_id}"]["put"]
    assert list(part["requestBody"]["content"]) == ["application/vnd.apache.arrow.file"]


def test_name_rules_come_from_store_names(client: httpx.Client) -> None:
    document = client.get("/openapi.json").json()
    parameters = {
        (path, p["name"]): p["schema"]
        for path, _, op in operations(document)
        for p in op.get("parameters", [])
    }
    produce_topic = parameters["/topics/{topic}/messages", "topic"]
    assert (produce_topic["pattern"], produce_topic["maxLength"]) == (TOPIC_NAME_PATTERN, 255)
    reserved = produce_topic["not"]["anyOf"]
    assert reserved == [{"enum": sorted(SYSTEM_TOPICS)}, {"pattern": "^rmq_sys_"}]
    assert "not" not in parameters["/topics/{topic}/queues/{queue_id}/messages", "topic"]  # reads any topic
    assert parameters["/groups/{group}/offsets", "group"]["pattern"] == GROUP_NAME_PATTERN
    schemas = document["components"]["schemas"]
    assert schemas["GroupOffsetsIn"]["properties"]["topic"]["pattern"] == TOPIC_NAME_PATTERN
    assert schemas["TransactionIn"]["properties"]["producer_group"]["pattern"] == GROUP_NAME_PATTERN


def test_limits_follow_the_configuration(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(
        max_batch_messages=7, max_request_bytes=4096, store={"timer_max_delay_ms": 3_600_000}
    )
    document = broker.client().get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    assert schemas["ProduceBatchIn"]["properties"]["messages"]["maxItems"] == 7
    batch = document["paths"]["/topics/{topic}/messages:batch"]["post"]["requestBody"]
    assert batch["content"]["application/x-ndjson"]["schema"]["maxItems"] == 7
    assert "At most 4096 bytes" in batch["description"]
    assert schemas["ProduceIn"]["properties"]["delay_ms"]["maximum"] == 3_600_000
    assert schemas["ProduceIn"]["properties"]["body"]["maxLength"] == 4 * 1024 * 1024
    assert "x-config-limit" not in json.dumps(document)


def test_integer_bounds_are_exact_integers(client: httpx.Client) -> None:
    """As floats, 2**62 + 95 would compare equal to 2**62 and pass for in range."""
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    offsets = schemas["GroupOffsetsIn"]["properties"]["offsets"]["additionalProperties"]
    assert offsets["maximum"] == 2**62 and type(offsets["maximum"]) is int


def test_bodies_state_their_content_types(client: httpx.Client) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    batch = paths["/topics/{topic}/messages:batch"]["post"]
    assert set(batch["requestBody"]["content"]) == {
        "application/json",
        "application/x-ndjson",
        "application/vnd.apache.arrow.stream",
    }
    assert "application/vnd.apache.arrow.stream" in batch["responses"]["201"]["content"]
    pull = paths["/topics/{topic}/queues/{queue_id}/messages"]["get"]["responses"]["200"]
    assert {"application/json", "application/vnd.apache.arrow.stream"} <= set(pull["content"])
    assert "X-Next-Offset" in pull["headers"]


def test_a_405_allows_every_method_of_the_path(client: httpx.Client) -> None:
    document = client.get("/openapi.json").json()
    for path, concrete in [
        ("/topics/{topic}", "/topics/x"),
        ("/transactions/{transaction_id}", "/transactions/y"),
    ]:
        response = client.request("OPTIONS", concrete)
        assert response.status_code == 405
        allowed = {method.strip().lower() for method in response.headers["allow"].split(",")}
        assert allowed - {"head"} == set(document["paths"][path]), path


RULES: list[Rule] = [
    ExactlyOne("a", "b"),
    AtMostOne("a", "b", "c"),
    Excludes("a", ("b", "c")),
    GivenWhen("b", "a", "x"),
]
_VALUES = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.none() | st.sampled_from(["x", "y", 1]))


@settings(max_examples=300, deadline=None)
@given(values=_VALUES, rule=st.sampled_from(RULES))
def test_each_rule_checks_what_its_schema_says(values: dict[str, Any], rule: Rule) -> None:
    """The model's check and the document's schema of a cross-field rule agree on every input."""
    validator = jsonschema_rs.validator_for({"type": "object", **rule.schema()})
    assert (rule.problem(values) is None) == validator.is_valid(values), (rule, values)


@settings(max_examples=200, deadline=None)
@given(address=st.ip_addresses(v=6), port=st.none() | st.integers(0, 65535))
def test_check_urls_with_ipv6_hosts(address: ipaddress.IPv6Address, port: int | None) -> None:
    for text in {address.compressed, address.exploded}:
        url = f"http://[{text}]" + (f":{port}" if port is not None else "") + "/check"
        assert re.fullmatch(CHECK_URL_PATTERN, url), url
