"""Transactions end to end: a real ``sparkmq serve`` with its operator job (the transaction
resolver on local Spark), real producer check-back servers on 127.0.0.1, and kill -9 of the driver.

Short settings: no check before 1 s, one check every 1.5 s, at most 3 checks."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.operators.broker_process import JOB_START_TIMEOUT_S, Broker, all_messages, start_broker
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TX_ARGS = ("--tx-immunity-ms", "1000", "--tx-check-interval-ms", "1500", "--tx-check-max", "3")
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"

#: How a producer answers its n-th check (1-based) of a transaction.
Answer = Callable[[int], tuple[int, dict[str, Any] | None, float]]

#: The resolvers this module exercises (the operator job runs only these).
RESOLVERS = "transactions"


def always(action: str) -> Answer:
    return lambda n: (200, {"action": action}, 0.0)


def after(first: Answer, then: Answer, n_first: int = 1) -> Answer:
    return lambda n: first(n) if n <= n_first else then(n)


class Producers:
    """A real HTTP server answering check-backs; records every check it receives."""

    def __init__(self) -> None:
        self.answers: dict[str, Answer] = {}
        self.checks: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
        self._lock = threading.Lock()
        producers = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                check = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with producers._lock:
                    producers.checks[check["transaction_id"]].append(check)
                    n = len(producers.checks[check["transaction_id"]])
                answer = producers.answers.get(check["transaction_id"], always("unknown"))
                status, body, delay = answer(n)
                time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(json.dumps(body or {}).encode())
                except OSError:
                    pass  # the broker gave up (read timeout)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self, txid: str) -> int:
        with self._lock:
            return len(self.checks[txid])


@pytest.fixture
def producers() -> Iterator[Producers]:
    running = Producers()
    yield running
    running.server.shutdown()


def register(broker: Broker, group: str, producers: Producers) -> None:
    with broker.http as http:
        assert (
            http.put(f"/producer-groups/{group}", json={"check_url": f"{producers.url}/{group}"}).status_code
            == 201
        )


def half(broker: Broker, topic: str, body: str, group: str) -> str:
    with broker.http as http:
        response = http.post(
            f"/topics/{topic}/messages", json={"body": body, "transaction": {"producer_group": group}}
        )
        assert response.status_code == 201, response.text
        return str(response.json()["transaction_id"])


def state(broker: Broker, txid: str) -> str:
    with broker.http as http:
        return str(http.get(f"/transactions/{txid}").json()["state"])


def visible(broker: Broker, topic: str) -> Counter[str]:
    return Counter(m["body"] for m in all_messages(broker, topic))


def test_check_backs_commit_discard_and_race(tmp_path: Path, producers: Producers) -> None:
    broker = start_broker(tmp_path, queries=RESOLVERS, extra_args=TX_ARGS)
    try:
        wait_until(
            lambda: any(op["operator"] == "transactions" and op.get("last_batch_id") is not None
                        for op in broker.operators()["operators"]),
            JOB_START_TIMEOUT_S,
            "the transaction query's first batch",
        )  # fmt: skip
        for group in ("silent", "late", "flaky", "slow", "racer", "direct"):
            register(broker, group, producers)
        silent = half(broker, "tx", "silent", "silent")
        late = half(broker, "tx", "late", "late")
        producers.answers[late] = after(always("unknown"), always("commit"))
        flaky = half(broker, "tx", "flaky", "flaky")
        producers.answers[flaky] = after(lambda n: (500, None, 0.0), always("commit"))
        slow = half(broker, "tx", "slow", "slow")
        producers.answers[slow] = after(lambda n: (200, {"action": "commit"}, 4.5), always("commit"))
        racer = half(broker, "tx", "racer", "racer")
        direct = half(broker, "tx", "direct", "direct")
        with broker.http as http:
            assert http.post(
                f"/transactions/{direct}", json={"action": "commit", "producer_group": "direct"}
            ).json()["ended_now"]

        # The racer's producer answers COMMIT to a check while it also commits directly.
        def race(n: int) -> tuple[int, dict[str, Any] | None, float]:
            with broker.http as http:
                http.post(f"/transactions/{racer}", json={"action": "commit", "producer_group": "racer"})
            return 200, {"action": "commit"}, 0.0

        producers.answers[racer] = race

        wait_until(
            lambda: state(broker, silent) == "discarded", 120, "the silent transaction to be discarded"
        )
        for txid in (late, flaky, slow, racer):
            wait_until(lambda t=txid: state(broker, t) == "committed", 60, f"transaction {txid} to commit")
        time.sleep(4)  # another check interval or two: nothing more may happen

        assert producers.count(silent) == 3, producers.checks[silent]
        assert [c["check_times"] for c in producers.checks[silent]] == [1, 2, 3]
        first = producers.checks[silent][0]
        assert first["producer_group"] == "silent" and first["topic"] == "tx" and first["uniq_key"] == silent
        assert len(first["msg_id"]) == 32
        assert producers.count(late) == 2 and producers.count(flaky) == 2
        assert producers.count(direct) == 0, "a transaction ended at once is never checked"
        assert visible(broker, "tx") == Counter({"late": 1, "flaky": 1, "slow": 1, "racer": 1, "direct": 1})
        discarded = [m for m in all_messages(broker, CHECK_MAX_TOPIC) if m["uniq_key"] == silent]
        assert len(discarded) == 1 and discarded[0]["properties"]["TRANSACTION_CHECK_TIMES"] == "3"
        with broker.http as http:
            assert http.get("/transactions", params={"state": "prepared"}).json()["transactions"] == []
        metrics = broker.http.get("/metrics").text
        assert 'sparkmq_transaction_checks_total{outcome="answer_commit"}' in metrics
        assert 'sparkmq_transaction_checks_total{outcome="timeout"} 1' in metrics
    finally:
        broker.stop(signal.SIGKILL)


def test_driver_kill9_keeps_checks_exact(tmp_path: Path, producers: Producers) -> None:
    """kill -9 of the driver before the POST of a batch of check decisions, then, in its next
    life, right after the POST (the replayed batch): after the restarts the silent transaction
    still gets exactly 3 checks and one discard; a late commit commits once."""
    markers = [tmp_path / f"{point}.killed" for point in ("before_post", "after_post")]
    faults = ";".join(f"{marker.stem}:{marker}" for marker in markers)
    broker = start_broker(
        tmp_path, queries=RESOLVERS, extra_args=TX_ARGS, env={"SPARKMQ_TEST_OPERATOR_FAULT": faults}
    )
    try:
        register(broker, "silent", producers)
        register(broker, "late", producers)
        silent = half(broker, "tx", "silent", "silent")
        late = half(broker, "tx", "late", "late")
        producers.answers[late] = after(always("unknown"), always("commit"), n_first=2)
        wait_until(lambda: state(broker, silent) == "discarded", JOB_START_TIMEOUT_S + 60, "the discard")
        wait_until(lambda: state(broker, late) == "committed", 60, "the late commit")
        assert [marker.exists() for marker in markers] == [True, True], "the driver was not killed twice"
        assert broker.operators()["job"]["restarts"] >= 2
        assert producers.count(silent) == 3, producers.checks[silent]
        assert producers.count(late) == 3
        assert visible(broker, "tx") == Counter({"late": 1})
        assert len([m for m in all_messages(broker, CHECK_MAX_TOPIC) if m["uniq_key"] == silent]) == 1
    finally:
        broker.stop(signal.SIGKILL)
