"""A Python client generated from ``/openapi.json`` works against a live broker.

``openapi-python-client`` (a test dependency) generates the client from the document a real
uvicorn broker serves, as docs/http_api.md tells users to; the test then creates a topic,
produces, pulls, queries by key and looks the message up with it, reads an error answer as
the shared ``ErrorOut``, and uses a token with auth on.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from .conftest import BrokerFactory, RunningBroker

#: What docs/http_api.md gives the generator: the Arrow and NDJSON bodies as bytes.
GENERATOR_CONFIG = """\
package_name_override: sparkmq_client
content_type_overrides:
  application/x-ndjson: application/octet-stream
  application/vnd.apache.arrow.stream: application/octet-stream
  application/vnd.apache.arrow.file: application/octet-stream
"""
TOKEN = "client-test-token"


@contextmanager
def generated_client(document: dict[str, Any], directory: Path) -> Iterator[ModuleType]:
    """Run the generator on ``document``; import the package it writes (``sparkmq_client``)."""
    (directory / "openapi.json").write_text(json.dumps(document))
    (directory / "config.yaml").write_text(GENERATOR_CONFIG)
    bin_dir = Path(sys.executable).parent
    command = [str(bin_dir / "openapi-python-client"), "generate", "--path", "openapi.json"]
    command += ["--output-path", "sparkmq_client", "--meta", "none", "--config", "config.yaml"]
    env = {**os.environ, "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])}
    result = subprocess.run(command, check=False, cwd=directory, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stdout, result.stdout  # every operation and model was understood
    sys.path.insert(0, str(directory))
    try:
        yield importlib.import_module("sparkmq_client")
    finally:
        sys.path.remove(str(directory))
        for name in [n for n in sys.modules if n == "sparkmq_client" or n.startswith("sparkmq_client.")]:
            del sys.modules[name]


@pytest.fixture
def generated(tmp_path: Path, shared_broker: RunningBroker) -> Iterator[ModuleType]:
    with shared_broker.client() as http:
        document = http.get("/openapi.json").json()
    with generated_client(document, tmp_path) as package:
        yield package


def api(name: str) -> Any:
    return importlib.import_module(f"sparkmq_client.api.{name}")


def test_produce_pull_and_look_up_with_a_generated_client(
    generated: ModuleType, shared_broker: RunningBroker, topic: str
) -> None:
    models = importlib.import_module("sparkmq_client.models")
    client = generated.Client(base_url=shared_broker.url, raise_on_unexpected_status=True)

    created = api("topics.create_or_grow_topic").sync(topic, client=client, body=models.TopicIn(queues=2))
    assert isinstance(created, models.TopicOut) and created.queues == 2

    entry = models.ProduceIn(body="order 42 paid", tags="paid", keys=["order-42"], queue_id=1)
    produced = api("messages.produce").sync(topic, client=client, body=entry, idempotency_key="order-42")
    assert isinstance(produced, models.ProduceOut)
    assert (produced.topic, produced.queue_id, produced.queue_offset) == (topic, 1, 0)
    again = api("messages.produce").sync(topic, client=client, body=entry, idempotency_key="order-42")
    assert again.msg_id == produced.msg_id  # the key made the retry idempotent

    pulled = api("queues.pull").sync(topic, 1, client=client, offset=0, max_messages=10)
    assert isinstance(pulled, models.PullOut)
    assert (pulled.status, pulled.next_offset) == ("FOUND", 1)
    assert [(m.body, m.tags, m.keys) for m in pulled.messages] == [("order 42 paid", "paid", ["order-42"])]

    by_id = api("messages.get_message").sync(produced.msg_id, client=client)
    assert isinstance(by_id, models.MessageOut) and by_id.uniq_key == produced.uniq_key
    by_key = api("messages.query_by_key").sync(topic, client=client, key="order-42")
    assert [m.msg_id for m in by_key.messages] == [produced.msg_id]

    refused = api("messages.produce").sync(topic, client=client, body=models.ProduceIn(body="x", queue_id=7))
    assert isinstance(refused, models.ErrorOut)
    assert refused.error == "unknown_queue"


def test_a_generated_client_with_a_token(tmp_path: Path, broker_factory: BrokerFactory) -> None:
    auth_file = tmp_path / "tokens.json"
    grants = {"admin": ["*"], "produce": ["*"], "consume": ["*"]}
    auth_file.write_text(json.dumps({"tokens": [{"name": "app", "token": TOKEN, **grants}]}))
    broker = broker_factory(auth_file=auth_file)
    document = broker.client(token=TOKEN).get("/openapi.json").json()
    directory = tmp_path / "client"
    directory.mkdir()
    with generated_client(document, directory) as generated:
        models = importlib.import_module("sparkmq_client.models")
        authenticated = generated.AuthenticatedClient(base_url=broker.url, token=TOKEN)
        produce = api("messages.produce")
        produced = produce.sync("secured", client=authenticated, body=models.ProduceIn(body="a"))
        assert isinstance(produced, models.ProduceOut)
        anonymous = generated.Client(base_url=broker.url)
        denied = api("topics.list_topics").sync(client=anonymous)
        assert isinstance(denied, models.ErrorOut) and denied.error == "unauthorized"
        listed = api("topics.list_topics").sync(client=authenticated)
        assert [t.topic for t in listed.topics] == ["secured"]
