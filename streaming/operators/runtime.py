"""The operator job: a Spark driver running the resolver queries (delay, transactions, retry)
against one broker.

``sparkmq serve`` starts it in a child process (``local[2]`` by default); ``sparkmq operators
--endpoint URL --master URL`` (or ``spark-submit ./streaming/operators/__main__.py``) runs the same job
on a cluster. Each resolver is its own streaming query with its own checkpoint under
``<checkpoint_dir>/<operator>``:

* it reads parked records with the ``sparkmq`` source (``systemTopics``), from the store
  directory when the job runs beside the broker (``--path``), else over HTTP;
* its ``transformWithState`` output goes to the broker with ``foreachBatch``: one POST of the
  batch's relocation requests per batch id, which the broker decides once and publishes
  idempotently (:mod:`store.publish.relocations`), so a replayed batch changes nothing;
* a reporter thread PUTs each query's progress to ``/operators/<operator>/status``.

Never ``Trigger.AvailableNow`` (with timers it never ends): a processing-time trigger.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from store import SCHEDULE_TOPIC, SENDBACK_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from streaming.offsets import without_clock
from streaming.operators import retry, tenure, transactions
from streaming.operators.client import BrokerClient
from streaming.operators.config import JobConfig, parse_args
from streaming.operators.daemons import IdleDaemons
from streaming.operators.delay import RELOCATE_DELIVER, ROW_RELOCATION, DelaySettings, resolve
from streaming.operators.names import (
    DELAY_OPERATOR,
    RETRY_OPERATOR,
    TRANSACTION_OPERATOR,
)

log = logging.getLogger("sparkmq.operators")

#: What a relocation POST carries (the broker ignores the summary-only columns for decisions).
POST_COLUMNS = (
    "row_type", "commitlog_offset", "kind", "enqueue_ms", "dequeue_ms", "due_ms", "bucket_ms", "shard",
    "pending", "next_action_ms", "src_queue", "min_queue_offset", "queue_id", "queue_offset", "count",
)  # fmt: skip


def _pending_fault(fault: str | None) -> tuple[str, str] | None:
    """The next crash point still to happen, as (point, marker file): ``fault`` lists one or
    more ``<point>:<marker>``, separated by ``;``, each happening once and in that order (a
    marker that exists is a crash that happened, in an earlier life of the job)."""
    for entry in (fault or "").split(";"):
        if entry:
            where, marker = entry.split(":", 1)
            if not os.path.exists(marker):
                return where, marker
    return None


def _maybe_die(fault: str | None, point: str, batch_id: int | None = None) -> None:
    """Test-only crash point: SIGKILL this process if ``point`` is the next one of ``fault``
    (the marker file records the point and the batch id: ``"after_post 7"``)."""
    pending = _pending_fault(fault)
    if pending is None or pending[0] != point:
        return
    Path(pending[1]).write_text(point if batch_id is None else f"{point} {batch_id}")
    log.warning("test fault: killing the operator driver at %s", point)
    os.kill(os.getpid(), signal.SIGKILL)


def _decided_ahead(table: pa.Table) -> bool:
    """Whether a posted batch holds DELIVER rows still due later than now (by this machine's
    clock, which the broker shares): rows the broker wrote as "due at T" for its wheel."""
    if "dequeue_ms" not in table.column_names or "kind" not in table.column_names:
        return False
    deliver = pc.and_(
        pc.equal(table.column("row_type"), ROW_RELOCATION), pc.equal(table.column("kind"), RELOCATE_DELIVER)
    )
    later = pc.greater(table.column("dequeue_ms"), int(time.time() * 1000))
    return bool(pc.any(pc.and_(deliver, later)).as_py())


def _relocations(table: pa.Table) -> int:
    return int(pc.sum(pc.equal(table.column("row_type"), ROW_RELOCATION)).as_py() or 0)


def batch_poster(
    client: BrokerClient,
    operator: str,
    fault: str | None = None,
    columns: Sequence[str] = POST_COLUMNS,
    decisions: Callable[[pa.Table], int] = _relocations,
) -> Callable[[Any, int], None]:
    """The ``foreachBatch`` function: one idempotent POST per batch id (replays are no-ops).
    ``decisions`` counts the rows that change something (the crash points apply to those)."""

    def post(df: Any, batch_id: int) -> None:
        started = time.monotonic()
        table = df.toArrow()
        computed = time.monotonic()
        if table.num_rows == 0:
            return
        table = table.select(list(columns))
        relocations = decisions(table)
        if relocations:
            _maybe_die(fault, "before_post")
            if (_pending_fault(fault) or ("",))[0] == "mid_post":
                threading.Timer(0.3, _maybe_die, (fault, "mid_post")).start()
        client.post_batch(operator, batch_id, table)
        if relocations:
            _maybe_die(fault, "after_post", batch_id)
            if operator == DELAY_OPERATOR and _decided_ahead(table):  # the wheel holds some of it
                _maybe_die(fault, "after_post_ahead", batch_id)
        log.info(
            "operator %s batch %d: %d decision(s); resolver %.2f s, publish %.2f s",
            operator, batch_id, relocations, computed - started, time.monotonic() - computed,
        )  # fmt: skip

    return post


#: The local driver JVM's options. The serial collector: one collector thread and no G1 region
#: tables (51 MB) for a heap of a few hundred MB on a machine of two cores; a small initial heap,
#: since the JVM otherwise starts at 1/64 of the machine's memory (384 MB on 24 GiB) and keeps it;
#: the client compiler only (C1): the job's JVM code is Spark's planning and glue, not a hot
#: loop, and without C2 its code cache and compiler arenas are ~70 MB smaller (lateness and
#: resolution throughput unchanged within noise, docs/operators.md).
LOCAL_JVM_OPTIONS = "-XX:+UseSerialGC -Xms64m -XX:TieredStopAtLevel=1"
#: glibc's malloc arenas, for the JVM and the Python workers it starts: by default up to 8 per
#: core of 64 MB each, one taken by each thread that allocates at once (Spark's JVM has ~100).
MALLOC_ARENAS = "2"


def session(config: JobConfig) -> Any:
    """The job's SparkSession: RocksDB state (transformWithState needs it), few partitions."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("MALLOC_ARENA_MAX", MALLOC_ARENAS)  # read by the processes it starts
    builder = SparkSession.builder.master(config.master) if config.master else SparkSession.builder
    builder = (
        builder.appName("sparkmq-operators")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(config.shards))
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        # State is ranges and packed pointers (kilobytes per key): cap RocksDB's native memory
        # (block cache and write buffers of every store instance together) instead of letting
        # each of the queries' partitions take RocksDB's defaults.
        .config("spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage", "true")
        .config("spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB", str(config.state_memory_mb))
        .config("spark.sql.session.timeZone", "UTC")
        # One pool of Python task workers instead of two: Spark keys its worker pools by their
        # environment, and the SQL runners (transformWithState) add SPARK_SIMPLIFIED_TRACEBACK
        # where the data source's read tasks do not, so each kept its own idle workers (two
        # more ~180 MB processes). Tracebacks then show PySpark's frames too.
        .config("spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled", "false")
    )
    if config.master.startswith("local"):  # the executors live in the driver's JVM
        builder = (
            builder.config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.memory", config.driver_memory)
            .config("spark.driver.extraJavaOptions", LOCAL_JVM_OPTIONS)
        )
    for key, value in config.spark_conf:
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    from streaming.register import register

    register(spark)
    return spark


def delay_settings(doc: dict[str, Any], shards: int) -> DelaySettings:
    return DelaySettings(
        level_delays_ms=tuple(int(ms) for ms in doc["delay_levels_ms"]),
        timer_precision_ms=int(doc.get("timer_precision_ms", 1000)),
        shards=shards,
        roll_window_ms=int(doc.get("timer_roll_window_ms", 86_400_000)),
        burst_cap=int(doc.get("burst_cap", 100_000)),
        lookahead_ms=int(doc.get("wheel_lookahead_ms", 0)),
    )


def _system_input(spark: Any, config: JobConfig, topics: str, max_per_trigger: int, clock_ms: int = 0) -> Any:
    """The ``sparkmq`` stream of the system topics an operator resolves, from the earliest record
    (``clock_ms``: a batch at least that often, input or not)."""
    reader = (
        spark.readStream.format("sparkmq")
        .option("topics", topics)
        .option("systemTopics", "true")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", str(max_per_trigger))
        .option("clockIntervalMs", str(clock_ms))
    )
    if config.path:  # the store directory: no HTTP, so no credential in the source's options
        return reader.option("path", config.path).load()
    reader = reader.option("endpoint", config.endpoint)
    if config.auth_token:
        reader = reader.option("token", config.auth_token)
    if config.tls_ca and config.endpoint.startswith("https://"):  # as httpx, which ignores it for http
        reader = reader.option("tlsCa", config.tls_ca)
    return reader.load()


#: Spark's switch for micro-batches without new input. A query takes the session's value when
#: it starts (its execution clones the session), so it can be set for one query.
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
#: The resolvers whose query runs a micro-batch at every trigger, input or not: a
#: ``transformWithState`` query in processing time does (SPARK-50180), and that batch fires its
#: timers. The delay resolver's timers must fire within its trigger. The others start with
#: Spark's no-data batches off: the retry resolver has no timers, so it runs a batch only when
#: input arrives; the transaction resolver's timers (check-backs) are fired by its source's
#: clock (``clockIntervalMs``: a batch every half check interval while idle).
EVERY_TRIGGER = (DELAY_OPERATOR,)


def _start(
    decisions: Any,
    name: str,
    config: JobConfig,
    poster: Any,
    trigger_ms: int | None = None,
) -> Any:
    """An operator's query: its decisions posted to the broker once per micro-batch (with no
    input, at every trigger only for :data:`EVERY_TRIGGER`)."""
    writer = (
        decisions.writeStream.queryName(name)
        .foreachBatch(poster)
        .option("checkpointLocation", str(config.checkpoint_dir / name))
        .trigger(processingTime=f"{trigger_ms or config.trigger_ms} milliseconds")
    )
    if name in EVERY_TRIGGER:
        return writer.start()
    spark = decisions.sparkSession
    before = spark.conf.get(NO_DATA_BATCHES)
    spark.conf.set(NO_DATA_BATCHES, "false")
    try:
        return writer.start()
    finally:
        spark.conf.set(NO_DATA_BATCHES, before)


def start_delay_query(spark: Any, config: JobConfig, client: BrokerClient, settings: DelaySettings) -> Any:
    parked = _system_input(spark, config, f"{SCHEDULE_TOPIC},{TIMER_TOPIC}", max(settings.burst_cap, 10_000))
    return _start(
        resolve(parked, settings), DELAY_OPERATOR, config, batch_poster(client, DELAY_OPERATOR, config.fault)
    )


def transaction_settings(doc: dict[str, Any]) -> transactions.TransactionSettings:
    return transactions.TransactionSettings(
        immunity_ms=int(doc.get("tx_immunity_ms", 6000)),
        check_interval_ms=int(doc.get("tx_check_interval_ms", 30_000)),
        check_max=int(doc.get("tx_check_max", 15)),
        reserved_ms=int(doc.get("file_reserved_ms", 72 * 3_600_000)),
    )


def start_transaction_query(
    spark: Any, config: JobConfig, client: BrokerClient, settings: transactions.TransactionSettings
) -> Any:
    # Idle, a batch every half check interval fires the check-backs' timers (RocketMQ's check
    # service runs once a check interval); with input, a batch at every trigger.
    clock = max(config.trigger_ms, settings.check_interval_ms // 2)
    halves_and_ops = _system_input(
        spark, config, f"{TRANS_HALF_TOPIC},{TRANS_OP_HALF_TOPIC}", 100_000, clock_ms=clock
    )
    columns = [column.name for column in transactions.OUTPUT_SCHEMA.fields]
    poster = batch_poster(client, TRANSACTION_OPERATOR, config.fault, columns, lambda t: t.num_rows)
    decisions = transactions.resolve(halves_and_ops, settings)
    # Never coarser than half a check interval (tests run with intervals of a second or two).
    trigger = min(config.background_trigger_ms, clock)
    return _start(decisions, TRANSACTION_OPERATOR, config, poster, trigger)


def start_retry_query(spark: Any, config: JobConfig, client: BrokerClient) -> Any:
    requests = _system_input(spark, config, SENDBACK_TOPIC, 100_000)
    poster = batch_poster(client, RETRY_OPERATOR, config.fault)
    decisions = retry.resolve(requests, retry.RetrySettings())
    # No timers: no batch without a send-back. Its TTL still holds: an expired attempt is never
    # read, and is removed in the next batch.
    return _start(decisions, RETRY_OPERATOR, config, poster, config.background_trigger_ms)


def query_status(query: Any) -> dict[str, Any]:
    """What ``/operators`` shows of a query, from its last progress."""
    progress = query.lastProgress or {}
    lag = 0
    end_offsets: dict[str, int] = {}
    for source in progress.get("sources", []):
        lag += _offset_gap(source.get("endOffset"), source.get("latestOffset"))
        end = source.get("endOffset")
        end = json.loads(end) if isinstance(end, str) else end
        if isinstance(end, dict):
            queues = without_clock(end)
            end_offsets.update({str(k): int(v) for k, v in queues.items() if isinstance(v, int | float)})
    status = query.status or {}
    return {
        "query_id": str(query.id),
        "state": "active" if query.isActive else "stopped",
        "message": status.get("message"),
        "last_batch_id": progress.get("batchId"),
        "last_batch_time": progress.get("timestamp"),
        "input_rows_per_second": progress.get("inputRowsPerSecond"),
        "input_lag": lag,
        "batch_duration_ms": (progress.get("durationMs") or {}).get("triggerExecution"),
        "end_offsets": end_offsets,
    }


def _offset_gap(end: Any, latest: Any) -> int:
    if isinstance(end, str):
        end = json.loads(end)
    if isinstance(latest, str):
        latest = json.loads(latest)
    if isinstance(end, dict) and isinstance(latest, dict):
        return sum(_offset_gap(end.get(k), v) for k, v in latest.items())
    if isinstance(end, int | float) and isinstance(latest, int | float):
        return max(0, int(latest) - int(end))
    return 0


#: A query that fails is restarted from its checkpoint (exactly once holds: Spark replays the
#: uncommitted batch) up to this many times in :data:`RESTART_WINDOW_S`; then the job exits.
MAX_QUERY_RESTARTS = 5
RESTART_WINDOW_S = 600.0
#: How long the job waits for a query's first batch before it starts the next query.
STAGGER_S = 60.0
#: PySpark gives a new Python worker a fixed 10 s to connect back to the JVM (the pre-init
#: worker a ``transformWithState`` query starts to plan its first batch is one). On a saturated
#: machine it may miss that: the query stops before it touched any state, and is started again
#: after a short pause, up to this many times in :data:`RESTART_WINDOW_S`, apart from the budget
#: of real failures above.
SLOW_WORKER_RESTARTS = 30
SLOW_WORKER = "Python worker failed to connect back"


def _restart_pause(name: str, error: str, failures: list[float], slow_starts: list[float]) -> float | None:
    """How long to wait before starting query ``name`` again after ``error``, or ``None``:
    it failed too often (``failures`` and ``slow_starts`` are its recent times, updated here)."""
    now = time.monotonic()
    slow = SLOW_WORKER in error
    recent = slow_starts if slow else failures
    recent[:] = [t for t in recent if now - t < RESTART_WINDOW_S] + [now]
    limit = SLOW_WORKER_RESTARTS if slow else MAX_QUERY_RESTARTS
    if len(recent) > limit:
        log.error("operator %s failed %d times in %.0f s: giving up", name, len(recent), RESTART_WINDOW_S)
        return None
    if slow:
        log.warning("operator %s: a Python worker missed Spark's connect-back time; starting again", name)
        return 2.0
    log.error("operator %s stopped: %s", name, error)
    return min(2.0 ** len(recent), 30.0)


def run(config: JobConfig, stop: threading.Event) -> int:
    """Run the resolver queries until ``stop`` is set; a failed query is restarted from its
    checkpoint (a Python worker that did not connect back in time on a loaded machine, a lost
    executor in local mode) unless it failed too often: then exit status 1."""
    # a job reading a broker's own store (--path) stays with that broker (see BrokerClient)
    client = BrokerClient(
        config.endpoint,
        config.auth_token,
        config.request_timeout_s,
        learn_group=config.path is None,
        tls_ca=config.tls_ca,
        client_cert=config.client_cert,
        stop=stop,
        retry_s=config.broker_grace_s or 300.0,
    )
    if config.lock_file is not None and tenure.hold_lock(config.lock_file) is None:
        log.error("another operator job holds %s: this one exits", config.lock_file)
        return tenure.LOCK_HELD_EXIT
    doc = client.settings()
    spark = session(config)
    broker = tenure.BrokerWatch(config.broker_grace_s)
    daemons = IdleDaemons(config.daemon_idle_s) if config.daemon_idle_s > 0 else None
    starters: dict[str, Callable[[], Any]] = {
        DELAY_OPERATOR: lambda: start_delay_query(spark, config, client, delay_settings(doc, config.shards)),
        TRANSACTION_OPERATOR: lambda: start_transaction_query(
            spark, config, client, transaction_settings(doc)
        ),
        RETRY_OPERATOR: lambda: start_retry_query(spark, config, client),
    }
    starters = {name: start for name, start in starters.items() if name in config.queries}
    queries: dict[str, Any] = {}
    failures: dict[str, list[float]] = {name: [] for name in starters}
    slow_starts: dict[str, list[float]] = {name: [] for name in starters}
    waiting = list(starters)  # started one at a time, in the loop below
    begun: set[str] = set()
    last: str | None = None  # the query started last
    last_start = 0.0
    try:
        while not stop.is_set():
            reach = client.reach()
            if reach is None:  # the queries keep running; their next POST waits for the broker
                if broker.unanswered():
                    log.error("no broker answered for %.0f s: the job exits", config.broker_grace_s)
                    logging.shutdown()
                    os._exit(tenure.BROKER_GONE_EXIT)  # as a driver kill -9: the queries do not drain
                stop.wait(1.0)
                continue
            broker.answered()
            if not reach:  # a replica group's slave: wait until this member leads
                if queries:
                    log.warning("the broker no longer leads its replica group: stopping the operators")
                    for name, query in queries.items():
                        query.stop()
                        client.put_status(name, {"state": "waiting: the broker is not its group's master"})
                    waiting, queries, last = list(starters), {}, None
                stop.wait(1.0)
                continue
            # One query at a time: each one's first batch starts Python workers, which must
            # connect back to the JVM within 10 s; started together on a loaded machine they
            # time out. The next starts once the last has made progress (or after STAGGER_S).
            # A failed query is started again through the same gate.
            previous = queries.get(last) if last is not None else None
            settled = previous is None or previous.lastProgress is not None or not previous.isActive
            if waiting and (settled or time.monotonic() - last_start > STAGGER_S):
                name = waiting.pop(0)
                queries[name] = starters[name]()
                last, last_start = name, time.monotonic()
                if name in begun:
                    log.info("operator %s restarted from its checkpoint", name)
                else:
                    begun.add(name)
                    log.info("operator %s started (checkpoint %s)", name, config.checkpoint_dir / name)
            for name, query in list(queries.items()):
                if query.isActive:
                    continue
                pause = _restart_pause(name, str(query.exception()), failures[name], slow_starts[name])
                if pause is None:
                    return 1
                del queries[name]
                stop.wait(pause)
                waiting.insert(0, name)
            for name, query in queries.items():
                client.put_status(name, query_status(query))
            if daemons is not None:
                daemons.look()
            stop.wait(1.0)
        return 0
    finally:
        for name, query in queries.items():
            query.stop()
            client.put_status(name, {"state": "stopped"})
        spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = parse_args(sys.argv[1:] if argv is None else argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return run(config, stop)
