"""The replication run that decides issues 22 and 33, short: one cycle of each fault (kill -9 of
the master, the master paused past its session, kill -9 of a slave, the master cut from
ZooKeeper but not from its clients, the master cut from its slaves, a full disk on the master
and on a slave) under HTTP and Kafka load, with an HTTP and a Kafka consumer committing group
offsets, a Spark query through the exactly-once sink and a Kafka consume-transform-produce
loop with transactions throughout; the checker decides message by message and commit by
commit. The full run is
``python -m bench.jepsen_replication --cycles 30``."""

from __future__ import annotations

import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import jepsen, jepsen_commits, jepsen_txn
from tests.support.cluster import ProcessCluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.kafka, pytest.mark.spark]


def test_nothing_acknowledged_is_lost_or_duplicated_and_no_replica_diverges(
    spark: Any, tmp_path: Path
) -> None:
    with ExitStack() as stack, ProcessCluster.started(tmp_path, []) as cluster:
        rig = jepsen.start_group(cluster, stack)
        history = jepsen.History()
        stop = threading.Event()
        commits = jepsen_commits.CommitHistory()
        workers = [jepsen.HttpProducer(cluster, history, stop), jepsen.KafkaProducer(cluster, history, stop)]
        workers += jepsen_commits.committers(
            cluster, jepsen.MEMBERS, jepsen.TOPIC, jepsen.QUEUES, commits, stop
        )
        loop = jepsen_txn.transformer(cluster, jepsen.MEMBERS, jepsen.TOPIC, jepsen.QUEUES, stop)
        workers.append(loop)
        for worker in workers:
            worker.start()
        reader = jepsen.SparkReader(spark, cluster, tmp_path)
        try:
            faults = jepsen.ALL_FAULTS
            jepsen.nemesis(cluster, history, len(faults), rig=rig, faults=faults)
        finally:
            stop.set()
            for worker in workers:
                worker.join(timeout=120)
        try:
            verdict = jepsen.check(cluster, history, reader, commits, txn=True, rig=rig)
        finally:
            reader.stop()
        for at, what in history.events:
            print(f"{at:7.2f} s  {what}")
        acked, refused, unknown = len(commits.acknowledged), commits.refused, commits.unknown
        print(f"commits: {acked} acknowledged, {refused} refused, {unknown} unknown")
        print(f"transactions: {loop.committed} committed, {loop.aborted} aborted, {loop.restarted} restarts")
        assert verdict.acknowledged > 100
        assert verdict.lost == [], f"acknowledged but lost: {verdict.lost[:20]}"
        assert verdict.duplicated == [], f"stored twice: {verdict.duplicated[:20]}"
        assert verdict.aborted == [], f"refused but stored: {verdict.aborted[:20]}"
        assert verdict.divergent == []
        assert verdict.spark_missing == [] and verdict.spark_duplicated == []
        assert [kind for kind, _ in verdict.failovers] == ["kill-master", "pause-master", "partition-master"]
        probes = {kind: probe for kind, probe, _ in history.held}
        assert probes.get("cut-slaves", "").startswith("503"), f"acknowledged without its slaves: {probes}"
        assert rig is not None
        if rig.disks:  # root only: the members' stores are on tmpfs
            assert probes["full-disk-master"] == "503 store_not_writable", probes
            assert probes["full-disk-slave"] == "201", f"a full slave held its master's writes: {probes}"
        assert verdict.commits is not None
        kinds = {c.kind for c in commits.acknowledged}
        assert kinds == {"http", "kafka"}, f"acknowledged commits by kind: {kinds}"
        went_back, moved = verdict.commits.went_back, verdict.commits.moved
        assert went_back == [], f"acknowledged commits gone back: {went_back[:10]}"
        assert moved == [], f"commits naming another message: {moved[:10]}"
        txn = verdict.txn
        assert txn is not None and loop.committed > 0 and txn.output > 0, (loop.errors, txn)
        assert txn.missing == [], f"committed input missing from the output: {txn.missing[:10]}"
        assert txn.duplicated == [], f"output twice: {txn.duplicated[:10]}\n" + "\n".join(
            jepsen_txn.explain(loop, txn, history.started)
        )
        assert txn.uncommitted == [], f"output past the committed offsets: {txn.uncommitted[:10]}"
