"""A streaming job's failed rows into the retry ladder (``streaming.sendback``) and the retry
topic read back with ``includeRetry`` (real local Spark, a real broker)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from store import Message, MessageStore, Relocation, RelocationKind, StoreConfig
from store.write.sendback import sendback_request
from streaming.sendback import send_back
from tests.operators.broker_process import start_broker

pytestmark = pytest.mark.spark


def test_failed_rows_are_sent_back_once_per_batch_even_when_replayed(spark: Any, tmp_path: Path) -> None:
    broker = start_broker(tmp_path, extra_args=("--operators", "off"))
    try:
        with broker.http as http:
            http.put("/groups/billing", json={})
            for i in range(6):
                http.post("/topics/orders/messages", json={"body": f"o{i}"}).raise_for_status()
        df = spark.read.format("sparkmq").option("endpoint", broker.url).option("topic", "orders").load()
        failed = df.where("CAST(body AS STRING) IN ('o1', 'o4')")
        first = send_back(failed, 7, endpoint=broker.url, group="billing", topic="orders", query="q")
        replay = send_back(failed, 7, endpoint=broker.url, group="billing", topic="orders", query="q")
        assert [a["outcome"] for a in first] == ["retry", "retry"]
        assert [a["request_id"] for a in replay] == [a["request_id"] for a in first]
        later = send_back(failed, 8, endpoint=broker.url, group="billing", topic="orders", query="q")
        assert {a["request_id"] for a in later}.isdisjoint({a["request_id"] for a in first})
    finally:
        broker.stop(signal.SIGKILL)


def test_include_retry_reads_retries_under_their_original_topic(spark: Any, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with MessageStore.open(StoreConfig(store_dir=store_dir, commitlog_file_size_bytes=1 << 22)) as ms:
        ms.create_topic("orders", 1)
        put = ms.put_message(Message(topic="orders", body=b"fails", queue_id=0))
        ms.create_topic("%RETRY%billing", 1)
        raw = ms.read_record(put.commitlog_offset)
        assert raw is not None
        request = sendback_request(
            raw, group="billing", delay_level=0, max_reconsume_times=16, retry_queues=1,
            uniq_key=ms.new_uniq_key(), born_ms=ms.now_ms(), store_host=("127.0.0.1", 10911),
        )  # fmt: skip
        (stored,) = ms.append_records([request])
        (parked,) = ms.relocate([Relocation(stored.commitlog_offset, RelocationKind.SENDBACK)])
        assert parked is not None
        ms.relocate(
            [Relocation(parked.commitlog_offset, RelocationKind.DELIVER)]
        )  # what the delay resolver does
    rows = (
        spark.read.format("sparkmq").option("path", str(store_dir)).option("topic", "orders")
        .option("includeRetry", "billing").load()
        .selectExpr("topic", "CAST(body AS STRING) AS body", "reconsume_times")
        .orderBy("reconsume_times").collect()
    )  # fmt: skip
    assert [(r.topic, r.body, r.reconsume_times) for r in rows] == [
        ("orders", "fails", 0),
        ("orders", "fails", 1),
    ]
