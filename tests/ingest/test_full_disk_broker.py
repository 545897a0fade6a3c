"""A broker process on a full disk (issue 33): a ``sparkmq serve`` on a 48 MiB tmpfs (root
only; skipped otherwise) is filled until it refuses.

- Produce is refused cleanly: HTTP ``503 store_not_writable``, and a real Kafka client
  (kafka-python) gets ``KAFKA_STORAGE_ERROR`` for its record.
- Reads keep working: over HTTP and with a Kafka consumer.
- ``kill -9`` on the full disk, restart: the broker recovers (no SIGBUS from a mapped file it
  cannot back), answers ``/healthz`` and serves every acknowledged message; writes are still
  refused cleanly.
- A filler file is deleted: writes resume by themselves, over HTTP and Kafka.

The checker: every acknowledged message (HTTP and Kafka) is read back exactly once, and no
refused one appears.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaStorageError

from tests.support.disks import fill_file, small_disk
from tests.support.network import free_port
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
QUEUES = 4
#: kafka-python, failing fast (a producer's refused record is reported, not retried).
KAFKA = {"request_timeout_ms": 5000, "metadata_max_age_ms": 2000, "reconnect_backoff_ms": 20}


class Broker:
    """One ``sparkmq serve`` process on ``store_dir``, restartable on the same ports."""

    def __init__(self, store_dir: Path, log_dir: Path) -> None:
        self.store_dir, self.log_dir = store_dir, log_dir
        self.port, self.kafka_port = free_port(), free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def start(self) -> None:
        self.starts += 1
        log = open(self.log_dir / f"broker-{self.starts}.log", "wb")  # noqa: SIM115 (the child owns it)
        command = [
            sys.executable, "-m", "sparkmq.cli", "serve", "--store-dir", str(self.store_dir),
            "--port", str(self.port), "--kafka-port", str(self.kafka_port), "--operators", "off",
            "--checkpoint-dir", str(self.log_dir / "checkpoints"), "--log-level", "warning",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # a SIGBUS shows where in the log
        self.process = subprocess.Popen(
            command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        wait_until(self._answers, 60, "the broker to answer /healthz")

    def _answers(self) -> bool:
        assert self.process is not None
        assert self.process.poll() is None, f"broker exited {self.process.returncode}: {self.log_tail()}"
        try:
            health = httpx.get(f"{self.url}/healthz", timeout=2)
        except httpx.HTTPError:
            return False
        # 503 store_degraded: the key index cannot grow on the full disk (it catches up later)
        return health.status_code == 200 or health.json().get("error") == "store_degraded"

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self) -> str:
        path = self.log_dir / f"broker-{self.starts}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


@contextmanager
def running(store_dir: Path, log_dir: Path) -> Iterator[Broker]:
    broker = Broker(store_dir, log_dir)
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()


class Ledger:
    """What was acknowledged, and what was refused."""

    def __init__(self) -> None:
        self.acked: list[str] = []
        self.refused: list[str] = []
        self.next_id = 0

    def ids(self, count: int, prefix: str) -> list[str]:
        first, self.next_id = self.next_id, self.next_id + count
        return [f"{prefix}{i:08d}" for i in range(first, first + count)]


def produce_http(http: httpx.Client, ledger: Ledger, count: int, body_bytes: int = 1000) -> httpx.Response:
    ids = ledger.ids(count, "h")
    response = http.post(
        "/topics/t/messages:batch", json={"messages": [{"body": i.ljust(body_bytes, "x")} for i in ids]}
    )
    if response.status_code == 201:
        ledger.acked += ids
    else:
        ledger.refused += ids
    return response


def fill_until_refused(http: httpx.Client, ledger: Ledger) -> httpx.Response:
    """Batches of 100, then single messages, until refused; returns the last refusal."""
    for count in (100, 1):
        for _ in range(100_000):
            response = produce_http(http, ledger, count)
            if response.status_code != 201:
                break
        assert response.status_code == 503, response.text
    return response


def produce_kafka(producer: KafkaProducer, ledger: Ledger, value_bytes: int = 1000) -> Exception | None:
    (key,) = ledger.ids(1, "k")
    try:
        producer.send("t", value=key.ljust(value_bytes, "y").encode()).get(timeout=30)
    except KafkaStorageError as exc:
        ledger.refused.append(key)
        refusal: Exception = exc
        return refusal
    ledger.acked.append(key)
    return None


def read_all(http: httpx.Client) -> Counter[str]:
    """Every message id stored in topic ``t``, counted, read over HTTP queue by queue."""
    seen: Counter[str] = Counter()
    for queue_id in range(QUEUES):
        offset = 0
        while True:
            response = http.get(
                f"/topics/t/queues/{queue_id}/messages", params={"offset": offset, "max_messages": 500}
            )
            assert response.status_code == 200, response.text
            page = response.json()
            if not page["messages"]:
                break
            seen.update(m["body"].rstrip("xy") for m in page["messages"])
            offset = page["next_offset"]
    return seen


def check_exactly_once(http: httpx.Client, ledger: Ledger) -> None:
    seen = read_all(http)
    duplicated = {i: n for i, n in seen.items() if n > 1}
    lost = set(ledger.acked) - set(seen)
    resurrected = set(ledger.refused) & set(seen)
    assert not duplicated and not lost and not resurrected, (duplicated, sorted(lost)[:10], resurrected)
    assert set(seen) == set(ledger.acked)


def kafka_values(bootstrap: str) -> set[str]:
    """Read topic ``t`` with a Kafka consumer (no group): consumers keep working."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=3000, **KAFKA)
    try:
        partitions = [TopicPartition("t", p) for p in range(QUEUES)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        return {record.value.decode().rstrip("xy") for record in consumer}
    finally:
        consumer.close()


def test_a_broker_on_a_full_disk_refuses_survives_kill_9_and_resumes(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", 48) as disk:
        fill_file(disk / "filler", 8 << 20)  # given back at the end
        ledger = Ledger()
        with (
            running(disk / "store", tmp_path) as broker,
            httpx.Client(base_url=broker.url, timeout=30) as http,
        ):
            assert http.put("/topics/t", json={"queues": QUEUES}).status_code in (200, 201)
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, retries=0, **KAFKA)
            for _ in range(20):
                assert produce_kafka(producer, ledger) is None
            refusal = fill_until_refused(http, ledger)
            assert refusal.json()["error"] == "store_not_writable", refusal.text
            assert refusal.json()["retriable"] is True
            # Kafka: records on the full disk fail with KAFKA_STORAGE_ERROR (code 56) (pages
            # allocated ahead for one queue may still take a few first)
            error = next(filter(None, (produce_kafka(producer, ledger, 16 << 10) for _ in range(500))), None)
            assert isinstance(error, KafkaStorageError) and error.errno == 56, error
            producer.close()
            check_exactly_once(http, ledger)
            assert kafka_values(broker.bootstrap) == set(ledger.acked)

            broker.kill()  # kill -9 on the full disk, and back
            broker.start()
            assert broker.process is not None and broker.process.poll() is None
            check_exactly_once(http, ledger)
            refusal = fill_until_refused(http, ledger)
            assert refusal.json()["error"] == "store_not_writable", refusal.text
            check_exactly_once(http, ledger)

            (disk / "filler").unlink()  # space returns: writes resume by themselves
            deadline = time.monotonic() + 30
            while produce_http(http, ledger, 100).status_code != 201:
                assert time.monotonic() < deadline, "writes did not resume"
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, retries=0, **KAFKA)
            for _ in range(20):
                assert produce_kafka(producer, ledger) is None
            producer.close()
            check_exactly_once(http, ledger)
            assert kafka_values(broker.bootstrap) == set(ledger.acked)
