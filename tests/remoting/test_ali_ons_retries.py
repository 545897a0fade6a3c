"""ali-ons through the retry ladder on a real ``sparkmq serve --remoting-port`` with its operator
job (the retry and delay resolvers on local Spark, a short level table): a consumer that fails a
message sends it back (CONSUMER_SEND_MSG_BACK), sees it again from ``%RETRY%group`` with its
reconsume times counted, and once they reach ``maxReconsumeTimes`` the message is a dead letter
in ``%DLQ%group``, with the UNIQ_KEY, body and tags it was sent with."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from store import SENDBACK_TOPIC
from tests.operators.broker_process import JOB_START_TIMEOUT_S, Broker, all_messages, start_broker
from tests.support.network import free_port
from tests.support.ons import ensure_ali_ons, run_producer, start_consumer
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(1800)]

SHORT_LEVELS = ("--delay-levels", "1s 1s 1s 1s 1s 1s 1s 1s")

#: The resolvers this module exercises (the operator job runs only these).
RESOLVERS = "delay,retry"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[Broker, str]]:
    ensure_ali_ons()
    port = free_port()
    running = start_broker(
        tmp_path, queries=RESOLVERS, extra_args=(*SHORT_LEVELS, "--remoting-port", str(port))
    )
    yield running, f"127.0.0.1:{port}"
    running.stop(signal.SIGKILL)


def test_a_failed_message_comes_back_through_the_retry_topic_then_lands_in_the_dlq(
    broker: tuple[Broker, str],
) -> None:
    server, name_srv = broker
    run_producer(name_srv, "RetryT", [{"body": "bad", "tags": "T"}, {"body": "good", "tags": "T"}])
    (original,) = [m for m in all_messages(server, "RetryT") if m["body"] == "bad"]
    consumer = start_consumer(
        name_srv,
        "G_RETRY",
        "RetryT",
        instanceName="r1",
        fail={"bad": 100},
        maxReconsumeTimes=2,
        timeoutMs=1_800_000,  # the driver's own deadline: longer than the operator job's start
    )
    try:
        consumer.wait_ready(60)

        def bad_deliveries() -> list[int]:
            return sorted(int(m["reconsumeTimes"]) for m in consumer.received if m["body"] == "bad")

        try:
            # the first redelivery waits for the operator job's retry query to start
            wait_until(lambda: bad_deliveries()[:2] == [0, 1], 3 * JOB_START_TIMEOUT_S, "a redelivery")
            wait_until(
                lambda: bad_deliveries() == [0, 1, 2], 2 * JOB_START_TIMEOUT_S, "three deliveries of 'bad'"
            )
        except AssertionError as exc:
            seen = [(m["body"], m["reconsumeTimes"], m["topic"]) for m in consumer.received]
            log = server.log_path.read_text(errors="replace")[-3000:]
            raise AssertionError(
                f"{exc}\nreceived: {seen}\nconsumer:\n{consumer.stderr[-2000:]}\nbroker:\n{log}"
            ) from exc
        dead: list[dict[str, Any]] = []

        def dead_letters() -> bool:
            dead[:] = all_messages(server, "%DLQ%G_RETRY")
            return bool(dead)

        wait_until(dead_letters, 2 * JOB_START_TIMEOUT_S, "the dead letter", poll_s=0.5)
    finally:
        consumer.stop()
    assert [m["body"] for m in consumer.received if m["body"] == "good"] == ["good"]
    (letter,) = dead
    assert (letter["body"], letter["tags"], letter["uniq_key"]) == ("bad", "T", original["uniq_key"])
    assert len(all_messages(server, SENDBACK_TOPIC)) == 3  # each failure went to the broker's ladder
    assert "send reconsume message failed" not in consumer.stderr
