"""The `sparkmq` HTTP client commands against a live broker, and `serve` argument checks."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from sparkmq.cli import app

from .conftest import RunningBroker

runner = CliRunner()


def test_topics_produce_consume(shared_broker: RunningBroker) -> None:
    url = ["--url", shared_broker.url]
    created = runner.invoke(app, ["topics", "create", "cli_topic", "--queues", "1", *url])
    assert created.exit_code == 0, created.output
    assert json.loads(created.stdout)["queues"] == 1
    listed = runner.invoke(app, ["topics", "list", *url])
    assert any(line.split() == ["cli_topic", "1"] for line in listed.stdout.splitlines()), listed.stdout
    one = runner.invoke(app, ["produce", "cli_topic", "hello", "--tags", "t", "--key", "k1", *url])
    assert json.loads(one.stdout)["queue_offset"] == 0
    many = runner.invoke(app, ["produce", "cli_topic", "-o", "table", *url], input="a\nb\n")
    assert "produced 2 messages" in many.stdout
    consumed = runner.invoke(app, ["consume", "cli_topic", "--max-messages", "10", *url])
    assert consumed.exit_code == 0, consumed.output
    bodies = [json.loads(line)["body"] for line in consumed.stdout.splitlines() if line.startswith("{")]
    assert bodies == ["hello", "a", "b"]


def test_unknown_topic_exits_3(shared_broker: RunningBroker) -> None:
    result = runner.invoke(app, ["consume", "no_such_cli_topic", "--url", shared_broker.url])
    assert result.exit_code == 3
    assert "404" in result.output


def test_serve_refuses_bad_settings(tmp_path: Path) -> None:
    result = runner.invoke(app, ["serve", "--store-dir", str(tmp_path), "--max-batch", "0"])
    assert result.exit_code == 2
    assert "max_batch_messages" in result.output
    missing = runner.invoke(
        app, ["serve", "--store-dir", str(tmp_path), "--auth-file", str(tmp_path / "nope.json")]
    )
    assert missing.exit_code == 2
