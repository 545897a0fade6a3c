"""The operators in a cluster: each broker runs its own operator job over its own parked, half
and send-back records, and each decision goes back to that broker (docs/cluster.md#operators).

Two broker processes, each with its operator job (local Spark): a delayed message, a
transaction resolved by a check-back, and a send-back, on a queue of each broker."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.cluster import ProcessCluster
from tests.support.turns import TURN_WAIT_S, several_spark_jobs  # noqa: F401 (a fixture)
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.slow]

#: Two Spark drivers start on a loaded 2-core machine: the test's budget, shared by its waits.
BUDGET_S = 840.0
TX_ARGS = ("--tx-immunity-ms", "1000", "--tx-check-interval-ms", "1500", "--tx-check-max", "3")


class CommitEverything:
    """A producer's check-back endpoint that commits every transaction it is asked about."""

    def __init__(self) -> None:
        self.checked: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                check = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.checked.append(check["transaction_id"])
                payload = json.dumps({"action": "commit"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/check"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def checker() -> Iterator[CommitEverything]:
    running = CommitEverything()
    yield running
    running.server.shutdown()


def _bodies(http: httpx.Client, topic: str, queue: int) -> list[str]:
    pulled = http.get(f"/topics/{topic}/queues/{queue}/messages", params={"offset": 0, "max_messages": 100})
    return [m["body"] for m in pulled.json()["messages"]]


@pytest.mark.timeout(BUDGET_S + TURN_WAIT_S)
@pytest.mark.usefixtures("several_spark_jobs")
def test_delays_transactions_and_send_backs_on_every_broker(
    tmp_path: Path, checker: CommitEverything
) -> None:
    args = ("--operators", "local", *TX_ARGS)
    # b1 has no send-back to resolve (the one below lands on b2): its job runs two queries
    queries = {"b1": ("--operator-queries", "delay,transactions")}
    deadline = time.monotonic() + BUDGET_S

    def left() -> float:
        return max(deadline - time.monotonic(), 1.0)

    with (
        ProcessCluster.started(tmp_path, ["b1", "b2"], args=args, more_args=queries) as cluster,
        cluster.http("b1") as http,
    ):
        assert http.put("/topics/ops", json={"queues": 2}).status_code == 201
        assert http.put("/producer-groups/shop", json={"check_url": checker.url}).status_code in (200, 201)
        owners = {0: "b1", 1: "b2"}
        txids = {}
        for queue, owner in owners.items():
            delayed = http.post(
                "/topics/ops/messages", json={"body": f"late-{queue}", "queue_id": queue, "delay_level": 1}
            )
            assert delayed.status_code == 201 and delayed.json()["broker"] == owner
            half = http.post(
                "/topics/ops/messages",
                json={"body": f"tx-{queue}", "queue_id": queue, "transaction": {"producer_group": "shop"}},
            )
            assert half.status_code == 201 and half.json()["broker"] == owner
            txids[queue] = half.json()["transaction_id"]
        for queue, owner in owners.items():
            with cluster.http(owner) as at_owner:
                wait_until(
                    lambda at_owner=at_owner, queue=queue: (
                        {f"late-{queue}", f"tx-{queue}"} <= set(_bodies(at_owner, "ops", queue))
                    ),
                    left(),
                    f"the delayed message and the checked-back transaction on {owner}",
                )
        assert set(checker.checked) == set(txids.values())  # each checked by the broker that holds it
        # a send-back of the message on b2's queue, asked of b1: the retry lands on b2's own queue
        stored = _bodies(http.__class__(base_url=cluster.brokers["b2"].url), "ops", 1)
        assert stored
        with cluster.http("b2") as at_b2:
            first = at_b2.get("/topics/ops/queues/1/messages", params={"offset": 0}).json()["messages"][0]
        sent = http.post(
            "/groups/shop-consumers/messages:sendBack",
            json={"topic": "ops", "msg_id": first["msg_id"], "delay_level": 1},
        )
        assert sent.status_code == 200, sent.text
        route = wait_until(
            lambda: (
                (r := http.get("/topics/%25RETRY%25shop-consumers/route")).status_code == 200 and r.json()
            ),
            30,
            "the retry topic's route",
        )
        assert [q["broker"] for q in route["queues"]] == ["b2"]
        with cluster.http("b2") as at_b2:
            wait_until(
                lambda: _bodies(at_b2, "%25RETRY%25shop-consumers", 0) == [first["body"]],
                left(),
                "the retry delivered to b2's retry queue",
            )
