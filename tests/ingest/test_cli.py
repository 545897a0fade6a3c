"""The `sparkmq` HTTP client commands against a live broker, and `serve` argument checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
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


@pytest.mark.slow
def test_serve_without_the_kafka_extra_says_how_to_get_it(tmp_path: Path) -> None:
    """The gateway's codecs are the optional ``kafka`` extra: without them ``--kafka-port``
    is refused with the install command (simulated: ``kafka`` cannot be imported)."""
    code = (
        "import sys; sys.modules['kafka'] = None\n"
        "from sparkmq.cli import main\n"
        f"sys.argv = ['sparkmq', 'serve', '--store-dir', {str(tmp_path)!r}, '--kafka-port', '0',"
        " '--operators', 'off']\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "sparkmq[kafka]" in done.stderr
