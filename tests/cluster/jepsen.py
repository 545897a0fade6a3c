"""A Jepsen-style run against one replica group: a workload, a nemesis, a history, a checker.

* **Workload**: HTTP batches with Idempotency-Keys sent to any member (a slave forwards to its
  master) and a confluent-kafka idempotent producer, every message a unique value. Each send is
  recorded as ``invoke`` then ``ok`` (acknowledged), ``fail`` (refused: nothing stored) or
  ``info`` (unknown outcome: a timeout, a lost connection after retries ran out). Beside them,
  an HTTP and a Kafka consumer commit group offsets (tests/cluster/jepsen_commits.py), and a
  Kafka consume-transform-produce loop commits transactions (tests/cluster/jepsen_txn.py).
* **Nemesis**: cycles of ``kill -9`` of the master, ``SIGSTOP`` of the master for longer than
  the ZooKeeper session then ``SIGCONT``, ``kill -9`` of a slave, each followed by a restart;
  and, on a :class:`Rig` (each member's ZooKeeper link and HA port behind a
  :class:`~tests.support.proxy.TcpProxy`, its store on a tmpfs of its own), the master cut from
  ZooKeeper but not from its clients, the master cut from its slaves, and a full disk on the
  master and on a slave, each healed after a while. Every failover (master kill, pause or
  partition → first acknowledged produce under a new epoch) is recorded with its time.
* **Checker** (:func:`check`), message by message, after the group is healed and has converged:
  every acknowledged value is in the final master's history exactly once (lost and duplicated
  values are listed); nothing refused is there; every replica's CommitLog is byte-identical to
  the final master's up to its own end (so no replica keeps a record the final history lacks,
  and all agree up to the smallest replicated offset); and, commit by commit, every
  acknowledged group commit is still there on the final master, naming the same message; and
  the loop's output is exactly its committed input.

Used by ``tests/cluster/test_jepsen.py`` (a short run in ``make test``) and
``bench/jepsen_replication.py`` (the full run: 20+ cycles, printed).
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from tests.cluster import jepsen_commits, jepsen_txn
from tests.support.cluster import ProcessCluster
from tests.support.disks import fill_disk, tmpfs
from tests.support.proxy import TcpProxy
from tests.support.waiting import wait_until

GROUP = "b1"
TOPIC = "jepsen"
#: Where the Spark query writes what it reads, through the exactly-once sink.
SINK_TOPIC = "jepsen-sink"
QUEUES = 2
MEMBERS = ("b1-a", "b1-b", "b1-c")
#: sync replication, at least two in sync, SYNC_FLUSH: acknowledged means fsynced on two disks. A
#: slave that has not caught up for 5 s leaves the in-sync set (RocketMQ's default is 15 s: a
#: cut or full slave would hold the group's writes that long).
BROKER_ARGS = (
    "--operators", "off", "--replication", "sync", "--min-insync", "2", "--flush", "sync",
    "--max-time-slave-not-catchup-ms", "5000",
)  # fmt: skip

#: The faults the nemesis cycles through. Every member process is killed, paused or restarted
#: by the first three; the rest need a :class:`Rig`.
KILLS_AND_PAUSES = ("kill-master", "pause-master", "kill-slave")
DISKS = ("full-disk-master", "full-disk-slave")
PARTITIONS_AND_DISKS = ("partition-master", "cut-slaves", *DISKS)
ALL_FAULTS = KILLS_AND_PAUSES + PARTITIONS_AND_DISKS
#: The faults after which another member leads (each recorded in ``History.failovers``).
FAILOVERS = ("kill-master", "pause-master", "partition-master")
#: Each member's tmpfs (MiB): the longest run writes well under half of it.
DISK_MIB = 512
#: How long a cut from the slaves or a full disk lasts (s): past the 5 s after which a slave
#: that has not caught up leaves the in-sync set.
HOLD_S = 8.0
#: How long a full master may take in writes that fit pages it allocated before the disk filled (s).
PROBE_FULL_S = 20.0


@dataclass
class History:
    """Every send: value -> outcome (``ok``, ``fail``, ``info``), and what the nemesis did."""

    outcomes: dict[str, str] = field(default_factory=dict)
    events: list[tuple[float, str]] = field(default_factory=list)
    failovers: list[tuple[str, float]] = field(default_factory=list)
    #: Faults that kept the master: (kind, what its probe got during the fault, seconds from
    #: the heal to the next acknowledged produce).
    held: list[tuple[str, str, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    started: float = field(default_factory=time.monotonic)

    def record(self, values: list[str], outcome: str) -> None:
        with self.lock:
            for value in values:
                if self.outcomes.get(value) != "ok":  # an ok is never taken back
                    self.outcomes[value] = outcome

    def event(self, what: str) -> None:
        with self.lock:
            self.events.append((time.monotonic() - self.started, what))

    def acknowledged(self) -> set[str]:
        with self.lock:
            return {v for v, outcome in self.outcomes.items() if outcome == "ok"}

    def refused(self) -> set[str]:
        with self.lock:
            return {v for v, outcome in self.outcomes.items() if outcome == "fail"}


# -- the group ----------------------------------------------------------------------------------


def describe(cluster: ProcessCluster, avoid: str | None = None) -> dict[str, Any] | None:
    """``GET /cluster``'s entry of the group, asked of any member that answers but ``avoid`` (a
    member cut from ZooKeeper, whose view is stale)."""
    for key in MEMBERS:
        broker = cluster.brokers.get(key)
        if broker is None or not broker.alive or key == avoid:
            continue
        with contextlib.suppress(httpx.HTTPError, StopIteration, ValueError):
            answer = httpx.get(f"{broker.url}/cluster", timeout=3).json()
            entry: dict[str, Any] = next(b for b in answer["brokers"] if b["name"] == GROUP)
            return entry
    return None


def master_key(cluster: ProcessCluster, avoid: str | None = None) -> str | None:
    """The member key of the group's live master (as the members but ``avoid`` report roles)."""
    group = describe(cluster, avoid)
    if group is None:
        return None
    by_id = {m["member_id"]: m for m in group.get("members") or []}
    for key in MEMBERS:
        broker = cluster.brokers.get(key)
        if broker is None or not broker.alive or key == avoid:
            continue
        for member in by_id.values():
            if member["http"] == broker.url and member["role"] == "master":
                return key
    return None


@dataclass
class Rig:
    """What the partitions and full disks act on: each member's ZooKeeper link (``--cluster``
    through a proxy) and HA port (advertised as a proxy in front of it, so its slaves replicate
    through it), and its store on a tmpfs of its own (``disks``: empty when no tmpfs can be
    mounted here, then ``why_no_disks`` says why and the disk faults are skipped)."""

    zk: dict[str, TcpProxy] = field(default_factory=dict)
    ha: dict[str, TcpProxy] = field(default_factory=dict)
    disks: dict[str, Path] = field(default_factory=dict)
    why_no_disks: str = ""

    def heal(self) -> None:
        for proxy in (*self.zk.values(), *self.ha.values()):
            proxy.heal()
        for disk in self.disks.values():
            for filler in disk.glob("filler*"):
                filler.unlink(missing_ok=True)


def start_group(cluster: ProcessCluster, stack: ExitStack | None = None) -> Rig | None:
    """The group of three, all in sync, its topics created. With ``stack`` (closed after the
    cluster: enter it first), on a :class:`Rig` that the stack takes down."""
    rig = Rig() if stack is not None else None
    for key in MEMBERS:
        if rig is None or stack is None:
            cluster.add(GROUP, ha=True, kafka=True, args=BROKER_ARGS, member=key)
            continue
        disk = stack.enter_context(tmpfs(cluster.root / key, DISK_MIB))
        if isinstance(disk, Path):
            rig.disks[key] = disk
        else:
            rig.why_no_disks = disk
        zk = stack.enter_context(TcpProxy(("127.0.0.1", cluster.zookeeper.port)))
        ha = stack.enter_context(TcpProxy())
        broker = cluster.add(
            GROUP, ha=True, kafka=True, args=(*BROKER_ARGS, "--ha-advertise", ha.address), member=key,
            zk_url=f"zk://{zk.address}{cluster.chroot}", wait=False,
        )  # fmt: skip
        assert broker.ha_port is not None
        ha.target = ("127.0.0.1", broker.ha_port)
        rig.zk[key], rig.ha[key] = zk, ha
    for key in MEMBERS:
        cluster.brokers[key].wait_healthy()
    wait_until(lambda: master_key(cluster), 90, "a master")
    wait_until(lambda: len((describe(cluster) or {}).get("in_sync") or []) == len(MEMBERS), 90, "all in sync")
    with cluster.http(MEMBERS[0]) as http:
        for topic in (TOPIC, SINK_TOPIC):
            created = http.put(f"/topics/{topic}", json={"queues": QUEUES})
            assert created.status_code in (200, 201), created.text
    return rig


# -- the workload ---------------------------------------------------------------------------------


class HttpProducer(threading.Thread):
    """Idempotent batches of 10 to a random live member, each retried under its key for up to
    ``retry_s``; ok, fail (a refusal that stores nothing) or info (no answer in time)."""

    def __init__(
        self, cluster: ProcessCluster, history: History, stop: threading.Event, retry_s: float = 20.0
    ):
        super().__init__(name="jepsen-http", daemon=True)
        self.cluster, self.history, self.stop, self.retry_s = cluster, history, stop, retry_s
        self.sent = 0

    def run(self) -> None:
        batch_no = 0
        while not self.stop.is_set():
            values = [f"h-{batch_no}-{i}" for i in range(10)]
            key = f"jepsen-{batch_no}"
            body = {"messages": [{"body": v, "queue_id": i % QUEUES} for i, v in enumerate(values)]}
            self.history.record(values, "info")
            self.history.record(values, self._send(key, body))
            batch_no += 1
            self.sent += len(values)

    def _send(self, key: str, body: dict[str, Any]) -> str:
        deadline = time.monotonic() + self.retry_s
        while time.monotonic() < deadline:
            live = [b for k, b in self.cluster.brokers.items() if k in MEMBERS and b.alive]
            if not live:
                time.sleep(0.2)
                continue
            broker = random.choice(live)
            try:
                answer = httpx.post(
                    f"{broker.url}/topics/{TOPIC}/messages:batch",
                    json=body,
                    headers={"Idempotency-Key": key},
                    timeout=10,
                )
            except httpx.HTTPError:
                continue  # unknown: retried under the same key
            if answer.status_code == 201:
                return "ok"
            time.sleep(0.1)  # 503 (no master, not enough in sync, timeout), 421: retried
        return "info"


class KafkaProducer(threading.Thread):
    """A confluent-kafka idempotent producer bootstrapped at every member."""

    def __init__(self, cluster: ProcessCluster, history: History, stop: threading.Event):
        super().__init__(name="jepsen-kafka", daemon=True)
        self.cluster, self.history, self.stop = cluster, history, stop
        self.sent = 0

    def run(self) -> None:
        from confluent_kafka import Producer

        servers = jepsen_commits.kafka_servers(self.cluster, MEMBERS)
        producer = Producer(
            {
                "bootstrap.servers": servers,
                "enable.idempotence": True,
                "acks": "all",
                "message.timeout.ms": 60_000,
                "linger.ms": 5,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )

        def delivered(err: Any, msg: Any) -> None:
            value = msg.value().decode()
            self.history.record([value], "ok" if err is None else ("fail" if not err.retriable() else "info"))

        n = 0
        while not self.stop.is_set():
            value = f"k-{n}"
            self.history.record([value], "info")
            try:
                producer.produce(TOPIC, value=value.encode(), partition=n % QUEUES, on_delivery=delivered)
            except BufferError:
                producer.poll(0.1)
                continue
            n += 1
            self.sent += 1
            producer.poll(0)
            if n % 50 == 0:
                time.sleep(0.05)
        producer.flush(90)


class SparkReader:
    """A Structured Streaming query reading the topic across the group (``endpoint`` mode,
    ``failOnDataLoss=false``: it waits out failovers) and writing every body to
    :data:`SINK_TOPIC` through the exactly-once sink (its coordinator, the endpoint member, is
    killed, paused and demoted like the others); the checker then wants every acknowledged
    message in the sink's topic exactly once."""

    WORKER_START_FLAKE = "Python worker failed to connect back"

    def __init__(
        self, spark: Any, cluster: ProcessCluster, root: Path, *, restart_on: tuple[str, ...] = ()
    ) -> None:
        """``restart_on``: error codes after which the query is started again (counted in
        ``restarts``) rather than failing the run: the bench's way to go on past a known
        open problem and still check the rest."""
        self.spark, self.cluster = spark, cluster
        self.checkpoint = str(root / "spark-checkpoint")
        self.restart_on = restart_on
        self.restarts: list[str] = []
        self.query = self._start()

    def _start(self) -> Any:
        endpoint = self.cluster.brokers[MEMBERS[0]].url
        return (
            self.spark.readStream.format("sparkmq")
            .option("endpoint", endpoint)
            .option("topic", TOPIC)
            .option("startingOffsets", "earliest")
            .option("failOnDataLoss", "false")
            .option("requestTimeoutMs", "5000")
            .load()
            .select("body")
            .writeStream.format("sparkmq")
            .option("endpoint", endpoint)
            .option("topic", SINK_TOPIC)
            .option("checkpointLocation", self.checkpoint)
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    def healthy(self) -> None:
        """Restart after a Python worker that missed Spark's connect-back on a loaded machine;
        any other failure is the checker's business."""
        error = self.query.exception()
        if error is not None:
            known = [code for code in self.restart_on if code in str(error)]
            if self.WORKER_START_FLAKE not in str(error) and not known:
                raise AssertionError(f"the Spark query failed: {str(error)[:3000]}")
            self.restarts += known
            self.query.stop()
            self.query = self._start()

    def bodies(self) -> list[str]:
        """What the sink has published, read from the current master (none known: nothing)."""
        master = master_key(self.cluster)
        if master is None:
            return []
        try:
            return drain(self.cluster.brokers[master].url, SINK_TOPIC)
        except (httpx.HTTPError, KeyError):
            return []

    def caught_up(self, expected: int) -> list[str] | None:
        self.healthy()
        bodies = [b for b in self.bodies() if not b.startswith("probe-")]
        return bodies if len(bodies) >= expected else None

    def stop(self) -> None:
        self.query.stop()


# -- the nemesis ----------------------------------------------------------------------------------


def nemesis(
    cluster: ProcessCluster,
    history: History,
    cycles: int,
    seed: int = 7,
    rig: Rig | None = None,
    faults: Sequence[str] = KILLS_AND_PAUSES,
    first_cycle: int = 0,
) -> None:
    """``cycles`` faults in turn from ``faults`` (those past :data:`KILLS_AND_PAUSES` need
    ``rig``); each time the victim restarts, resumes or is healed once the group has moved on.
    Cycles are numbered from ``first_cycle`` in the history."""
    rng = random.Random(seed + first_cycle)
    for cycle in range(first_cycle, first_cycle + cycles):
        kind = faults[(cycle - first_cycle) % len(faults)]
        wait_until(lambda: master_key(cluster), 120, "a master before the fault")
        master = master_key(cluster)
        assert master is not None
        epoch = (describe(cluster) or {}).get("epoch")
        slaves = [k for k in MEMBERS if k != master and cluster.brokers[k].alive]
        if kind in PARTITIONS_AND_DISKS:
            assert rig is not None, f"{kind} needs a Rig (start_group with a stack)"
            if kind.startswith("full-disk") and not rig.disks:
                history.event(f"cycle {cycle}: {kind} skipped: {rig.why_no_disks}")
                continue
        if kind == "kill-slave":
            victim = rng.choice(slaves)
            history.event(f"cycle {cycle}: kill -9 slave {victim}")
            cluster.brokers[victim].kill()
            time.sleep(rng.uniform(1, 3))
            cluster.restart(victim)
        elif kind in FAILOVERS:
            _fail_over(cluster, history, rig, cycle, kind, master, epoch)
        else:
            assert rig is not None
            _hold(cluster, history, rig, cycle, kind, master, rng.choice(slaves))
        wait_until(lambda: len((describe(cluster) or {}).get("in_sync") or []) >= 2, 120, "two in sync again")


def _fail_over(
    cluster: ProcessCluster,
    history: History,
    rig: Rig | None,
    cycle: int,
    kind: str,
    master: str,
    epoch: int | None,
) -> None:
    """Kill, pause or cut the master from ZooKeeper; time the failover; restart, resume or heal."""
    session_s = cluster.session_timeout_ms / 1000
    began = time.monotonic()
    if kind == "kill-master":
        history.event(f"cycle {cycle}: kill -9 master {master} (epoch {epoch})")
        cluster.brokers[master].kill()
    elif kind == "pause-master":
        history.event(f"cycle {cycle}: SIGSTOP master {master} (epoch {epoch}) for {session_s * 2.5:.1f} s")
        cluster.brokers[master].pause()
    else:  # its clients still reach it: it must stop acknowledging before another member leads
        assert rig is not None
        history.event(
            f"cycle {cycle}: master {master} (epoch {epoch}) cut from ZooKeeper, not from its clients, "
            f"for {session_s * 2.5:.1f} s"
        )
        rig.zk[master].cut()
    # The cut master answers clients from a stale view: ask the others who leads.
    avoid = master if kind == "partition-master" else None
    new_epoch = wait_until(partial(_newer_epoch, cluster, epoch, avoid), 120, "a new master")
    took = _first_ack(cluster, began, avoid)
    history.failovers.append((kind, took))
    history.event(
        f"cycle {cycle}: epoch {new_epoch}, first acknowledged produce {took:.2f} s after the fault"
    )
    if kind == "kill-master":
        cluster.restart(master)
        history.event(f"cycle {cycle}: restarted {master}")
        return
    time.sleep(max(0.0, session_s * 2.5 - (time.monotonic() - began)))
    if kind == "pause-master":
        cluster.brokers[master].resume()
        history.event(f"cycle {cycle}: SIGCONT {master}")
    else:
        assert rig is not None
        rig.zk[master].heal()
        history.event(f"cycle {cycle}: healed {master}'s link to ZooKeeper")


def _hold(
    cluster: ProcessCluster, history: History, rig: Rig, cycle: int, kind: str, master: str, slave: str
) -> None:
    """A fault that keeps the master, for :data:`HOLD_S`: the master cut from its slaves (it
    must acknowledge nothing they lack; with ``--min-insync 2`` it refuses once they leave the
    in-sync set), or a full disk on the master (produce refused cleanly) or on a slave (it leaves
    the in-sync set; the master goes on with the other). What a probe produce to the master got
    during the fault, and how long after the heal the next produce was acknowledged, go to
    ``history.held``."""
    victim = slave if kind == "full-disk-slave" else master
    if kind == "cut-slaves":
        history.event(f"cycle {cycle}: master {master} cut from its slaves (HA port) for {HOLD_S:.0f} s")
        rig.ha[master].cut()
    else:
        written = fill_disk(rig.disks[victim], "filler")
        history.event(f"cycle {cycle}: {victim}'s disk full ({written >> 20} MiB filler) for {HOLD_S:.0f} s")
    url = cluster.brokers[master].url
    if kind == "full-disk-master":
        # The disk is full, but the store may still hold pages it allocated ahead: big probes use
        # them up, and the refusal that follows is the answer; then the fault lasts HOLD_S.
        # What the broker frees meanwhile (staging files it collects, say) is filled again
        # before each probe: the disk stays full (a loaded CI run's probes got 201 for 20 s).
        disk = rig.disks[victim]
        topped: list[int] = []

        def top_up() -> None:
            topped.append(fill_disk(disk, f"filler-{len(topped)}"))

        probe = _probe(url, time.monotonic() + PROBE_FULL_S, refusal_expected=True, before=top_up)
        if sum(topped):
            history.event(
                f"cycle {cycle}: {sum(topped) >> 10} KiB freed on {victim}'s disk during the fault, "
                "filled again"
            )
        time.sleep(HOLD_S)
    else:
        began = time.monotonic()
        time.sleep(HOLD_S - 2)  # a full slave, or slaves cut off, have left the in-sync set by now
        probe = _probe(url, began + HOLD_S, refusal_expected=kind == "cut-slaves")
    if kind == "cut-slaves":
        rig.ha[master].heal()
    else:
        for filler in rig.disks[victim].glob("filler*"):
            filler.unlink()
    healed = time.monotonic()
    took = _first_ack(cluster, healed)
    history.held.append((kind, probe, took))
    history.event(f"cycle {cycle}: healed; the probe got {probe}; next acknowledged produce {took:.2f} s on")


def _probe(url: str, until: float, refusal_expected: bool, before: Callable[[], None] | None = None) -> str:
    """Produce to ``url`` until ``until``: ``201``, ``503 <error>``, or what went wrong. With
    ``refusal_expected`` (a cut or full master) the first refusal that says why is the answer,
    and 1 MiB probes use up what the disk still had allocated; else the first ``201`` is.
    ``before`` runs before each probe."""
    outcome, body = "no answer", "x" * (1 << 20 if refusal_expected else 16)
    while time.monotonic() < until:
        if before is not None:
            before()
        try:
            answer = httpx.post(
                f"{url}/topics/{TOPIC}/messages",
                json={"body": f"probe-{time.monotonic_ns()}-{body}", "queue_id": 0},
                timeout=max(0.5, until - time.monotonic()),
            )
        except httpx.HTTPError as exc:
            outcome = type(exc).__name__
            continue
        if answer.status_code == 201:
            outcome = "201"
            if not refusal_expected:
                return outcome
            continue
        with contextlib.suppress(ValueError):
            outcome = f"{answer.status_code} {answer.json().get('error')}"
            if refusal_expected and answer.json().get("error"):
                return outcome
        time.sleep(0.1)
    return outcome


def _newer_epoch(cluster: ProcessCluster, epoch: int | None, avoid: str | None = None) -> int | None:
    group = describe(cluster, avoid)
    if group is None or epoch is None or (group.get("epoch") or 0) <= epoch:
        return None
    if master_key(cluster, avoid) is None:
        return None
    return int(group["epoch"])


def _first_ack(cluster: ProcessCluster, since: float, avoid: str | None = None) -> float:
    """Seconds from ``since`` to the first produce the (new) master acknowledges."""
    while True:
        master = master_key(cluster, avoid)
        if master is not None:
            with contextlib.suppress(httpx.HTTPError):
                answer = httpx.post(
                    f"{cluster.brokers[master].url}/topics/{TOPIC}/messages",
                    json={"body": f"probe-{time.monotonic_ns()}", "queue_id": 0},
                    timeout=5,
                )
                if answer.status_code == 201:
                    return time.monotonic() - since
        time.sleep(0.05)


# -- healing and checking -------------------------------------------------------------------------


def heal(cluster: ProcessCluster, rig: Rig | None = None) -> str:
    """Every member running and caught up (every link and disk healed): the final master's key."""
    if rig is not None:
        rig.heal()
    for key in MEMBERS:
        broker = cluster.brokers[key]
        if broker.alive:
            broker.resume()
        else:
            cluster.restart(key)
    master = wait_until(lambda: master_key(cluster), 120, "a master after healing")

    def converged() -> bool:
        group = describe(cluster) or {}
        members = group.get("members") or []
        offsets = {m["replicated_offset"] for m in members}
        return len(members) == len(MEMBERS) and len(offsets) == 1 and None not in offsets

    wait_until(converged, 180, "every replica at the master's offset")
    assert master is not None
    return master


def drain(url: str, topic: str = TOPIC) -> list[str]:
    """Every message body of ``topic``, read from ``url`` (all queues, in offset order)."""
    with httpx.Client(base_url=url, timeout=30) as http:
        return [
            body
            for queue in range(QUEUES)
            for body in jepsen_commits.queue_bodies(http, topic, queue).values()
        ]


@dataclass
class Verdict:
    acknowledged: int
    lost: list[str]
    duplicated: list[str]
    aborted: list[str]
    divergent: list[str]
    failovers: list[tuple[str, float]]
    #: What the Spark query's output lacks or holds twice (``None``: no Spark query ran).
    spark_missing: list[str] | None = None
    spark_duplicated: list[str] | None = None
    #: The group commits, commit by commit (``None``: no consumer committed).
    commits: jepsen_commits.CommitVerdict | None = None
    #: The Kafka consume-transform-produce loop's output against its offsets (``None``: no loop).
    txn: jepsen_txn.TxnVerdict | None = None

    @property
    def valid(self) -> bool:
        spark_ok = not (self.spark_missing or self.spark_duplicated)
        commits_ok = (self.commits is None or self.commits.valid) and (self.txn is None or self.txn.valid)
        messages_ok = not (self.lost or self.duplicated or self.aborted or self.divergent)
        return spark_ok and commits_ok and messages_ok


def check(
    cluster: ProcessCluster,
    history: History,
    spark: SparkReader | None = None,
    commits: jepsen_commits.CommitHistory | None = None,
    txn: bool = False,
    rig: Rig | None = None,
) -> Verdict:
    master = heal(cluster, rig)
    bodies = [b for b in drain(cluster.brokers[master].url) if not b.startswith("probe-")]
    counts = Counter(bodies)
    acknowledged = history.acknowledged()
    ends = {m["http"]: m["replicated_offset"] for m in (describe(cluster) or {}).get("members") or []}
    divergent = compare_logs(cluster, master, ends)
    verdict = Verdict(
        acknowledged=len(acknowledged),
        lost=sorted(acknowledged - set(counts)),
        duplicated=sorted(v for v, n in counts.items() if n > 1),
        aborted=sorted(history.refused() & set(counts)),
        divergent=divergent,
        failovers=list(history.failovers),
    )
    if commits is not None:
        verdict.commits = jepsen_commits.check(cluster.brokers[master].url, TOPIC, QUEUES, commits)
    if txn:
        servers = jepsen_commits.kafka_servers(cluster, MEMBERS)
        verdict.txn = jepsen_txn.check(cluster.brokers[master].url, servers, TOPIC, QUEUES)
    if spark is not None:  # the query read across every failover: each message once
        read = wait_until(
            lambda: spark.caught_up(len(bodies)), 600, "the Spark query to catch up", poll_s=1.0
        )
        seen = Counter(read)
        verdict.spark_missing = sorted(set(counts) - set(seen))
        verdict.spark_duplicated = sorted(v for v, n in seen.items() if n > 1)
    return verdict


def compare_logs(cluster: ProcessCluster, master: str, ends: dict[str, int]) -> list[str]:
    """Each replica's CommitLog against the final master's, MiB by MiB, up to its own end."""
    reference = cluster.brokers[master]
    problems = []
    for key in MEMBERS:
        broker = cluster.brokers[key]
        end = ends.get(broker.url)
        if end is None:
            problems.append(f"{key}: no replicated offset reported")
            continue
        for start, mine, theirs in zip_chunks(broker.store_dir, reference.store_dir, end):
            if mine != theirs:
                problems.append(f"{key} differs from {master} in [{start}, {start + (1 << 20)})")
                break
    return problems


def zip_chunks(left: Path, right: Path, end: int) -> Iterator[tuple[int, str, str]]:
    chunk = 1 << 20
    for start in range(0, end, chunk):
        size = min(chunk, end - start)
        yield start, _digest(left, start, size), _digest(right, start, size)


def _digest(store_dir: Path, start: int, size: int) -> str:
    files = sorted((store_dir / "commitlog").iterdir(), key=lambda p: int(p.name))
    digest = hashlib.sha256()
    remaining, position = size, start
    for path in files:
        base = int(path.name)
        length = path.stat().st_size
        if position >= base + length or remaining == 0:
            continue
        with path.open("rb") as f:
            f.seek(position - base)
            data = f.read(min(remaining, base + length - position))
        digest.update(data)
        remaining -= len(data)
        position += len(data)
    return digest.hexdigest()
