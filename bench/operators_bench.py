"""Delayed delivery figures: resolution throughput (level and timer messages), lateness, a hot
second, 1M pending, recovery; plain batch produce of the same run beside them.

Runs a real ``sparkmq serve`` (with its operator job: local Spark, transformWithState on
RocksDB) on a temporary store, produces over HTTP, and reads the delivered records back with
their store timestamps. Lateness = delivered store time - due time (parked store time + level
delay; a timer message: its requested time rounded up to the second), computed per message from
the records themselves. Prints figures; asserts nothing.

    python -m bench.operators_bench            # all scenarios (~20 min on 2 cores)
    python -m bench.operators_bench --quick    # smaller counts
    python -m bench.operators_bench --only throughput-level hot   # some scenarios

Lateness runs use level 2 (5 s) and timer messages 5 s ahead: a delay shorter than the resolver's
read latency (a trigger plus a batch) cannot be decided before it is due and goes out when
decided (level 1, 1 s: the old path's lateness). ``--serve-args "--wheel-lookahead 3s"`` runs the
brokers with other flags (the wheel's look-ahead is 10 s by default).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa

from tests.operators.broker_process import Broker, children_of, start_broker
from tests.support.waiting import wait_until

ARROW = "application/vnd.apache.arrow.stream"
LEVEL_MS = {1: 1000, 2: 5000, 3: 10_000, 4: 30_000, 18: 7_200_000}


def produce(
    http: httpx.Client,
    topic: str,
    count: int,
    level: int,
    batch: int = 5000,
    deliver_at_ms: int | None = None,
    delay_ms: int | None = None,
) -> None:
    """``count`` messages of 100 B: delayed by ``level``, or timer messages due at ``deliver_at_ms``
    or ``delay_ms`` after their store time (or plain when all are 0/None)."""
    entry: dict[str, object] = {"body": "x" * 100}
    if deliver_at_ms is not None:
        entry["deliver_at_ms"] = deliver_at_ms
    elif delay_ms is not None:
        entry["delay_ms"] = delay_ms
    elif level:
        entry["delay_level"] = level
    for lo in range(0, count, batch):
        n = min(batch, count - lo)
        resp = http.post(f"/topics/{topic}/messages:batch", json={"messages": [entry] * n})
        resp.raise_for_status()


def produce_at_rate(
    http: httpx.Client, topic: str, rate: int, seconds: float, level: int, delay_ms: int | None = None
) -> int:
    """About ``rate`` msg/s for ``seconds``, in 100 ms slices."""
    sent, start = 0, time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        due = int(rate * (elapsed + 0.1)) - sent
        if due > 0:
            produce(http, topic, due, level, delay_ms=delay_ms)
            sent += due
        time.sleep(max(0.0, start + elapsed + 0.1 - time.monotonic()))
    return sent


def read_all(http: httpx.Client, topic: str, with_properties: bool = False) -> pa.Table:
    """``uniq_key`` and ``store_timestamp`` (epoch ms) of every message of ``topic``, and
    ``properties`` when asked."""
    columns = ["uniq_key", "store_timestamp", *(["properties"] if with_properties else [])]
    described = http.get(f"/topics/{topic}")
    tables = []
    for queue in described.json()["queue_offsets"] if described.status_code == 200 else []:
        offset = queue["min_offset"]
        while offset < queue["max_offset"]:
            resp = http.get(
                f"/topics/{topic}/queues/{queue['queue_id']}/messages",
                params={"offset": offset, "max_messages": 100_000},
                headers={"accept": ARROW},
            )
            table = pa.ipc.open_stream(resp.content).read_all()
            if table.num_rows == 0:
                break
            tables.append(table.select(columns))
            offset += table.num_rows
    if not tables:
        empty = {"uniq_key": pa.array([], pa.string()), "store_timestamp": pa.array([], pa.int64())}
        if with_properties:
            empty["properties"] = pa.array([], pa.map_(pa.string(), pa.string()))
        return pa.table(empty)
    table = pa.concat_tables(tables)
    millis = table.column("store_timestamp").cast(pa.timestamp("ms")).cast(pa.int64())
    return table.set_column(1, "store_timestamp", millis)


def lateness_ms(
    http: httpx.Client, topic: str, level: int, delay_ms: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per delivered message: its due time (epoch ms) and its lateness, delivered store time -
    due time. Level: parked store time + the
    level's delay. Timer: the due time the broker gave it at admission, ``TIMER_OUT_MS`` +
    precision (1 s): the requested time (admission time + ``delay_ms``) rounded up to the second.
    (Not the parked store time + ``delay_ms``: a batch admitted just before a second boundary is
    stored just after it, and would look a second early.)"""
    timers = delay_ms is not None
    parking = "rmq_sys_wheel_timer" if timers else "SCHEDULE_TOPIC_XXXX"
    parked = read_all(http, parking, with_properties=timers)
    delivered = read_all(http, topic)
    keys = parked.column("uniq_key").to_pylist()
    if timers:
        props = parked.column("properties").to_pylist()
        due_at = {k: int(dict(p)["TIMER_OUT_MS"]) + 1000 for k, p in zip(keys, props, strict=True)}
    else:
        stamps = parked.column("store_timestamp").to_pylist()
        due_at = {k: int(t) + LEVEL_MS[level] for k, t in zip(keys, stamps, strict=True)}
    got = zip(
        delivered.column("uniq_key").to_pylist(), delivered.column("store_timestamp").to_pylist(), strict=True
    )
    pairs = [(due_at[key], ts - due_at[key]) for key, ts in got if key in due_at]
    due, late = (np.asarray(column, dtype=np.int64) for column in zip(*pairs, strict=True))
    return due, late


def p99_by_window(due: np.ndarray, late: np.ndarray, window_ms: int = 10_000) -> str:
    """The lateness p99 of each ``window_ms`` of due time, from the first: where the tail is."""
    windows = (due - due.min()) // window_ms
    return ", ".join(f"{np.percentile(late[windows == w], 99):.0f}" for w in np.unique(windows))


def relocated(broker: Broker) -> int:
    return int(broker.delay_operator().get("relocated_total") or 0)


#: Extra ``sparkmq serve`` flags of every broker the bench starts (``--serve-args``).
SERVE_ARGS: tuple[str, ...] = ()


@contextmanager
def running_broker(root: Path, env: dict[str, str] | None = None) -> Iterator[Broker]:
    broker = start_broker(root, env=env, extra_args=SERVE_ARGS)
    try:
        wait_until(
            lambda: broker.delay_operator().get("state") == "active", 300, "the delay query", poll_s=0.5
        )
        with broker.http as http:  # warm-up: Python workers started, first stateful batches run
            produce(http, "warm-up", 10, 1)
        wait_until(lambda: relocated(broker) >= 10, 300, "the warm-up deliveries", poll_s=0.2)
        yield broker
    finally:
        broker.stop(signal.SIGTERM)


def tree_rss_mb(pid: int) -> float:
    return sum(rss for _, rss, _ in tree_rss_by_kind(pid).values())


def tree_rss_by_kind(pid: int) -> dict[str, tuple[int, float, float]]:
    """(processes, RSS MB, PSS MB) of a process tree by kind (``java``, or the Python module run).
    RSS counts a page shared by several processes (a forked worker's pages of its daemon) once
    per process; PSS divides it among them, so the tree's PSS is what the machine spends."""
    out: dict[str, tuple[int, float, float]] = {}
    todo = [pid]
    while todo:
        p = todo.pop()
        todo.extend(children_of(p))
        try:
            args = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
            rss = _kib(Path(f"/proc/{p}/status"), "VmRSS:")
            pss = _kib(Path(f"/proc/{p}/smaps_rollup"), "Pss:")
        except OSError:
            continue
        module = args[2] if args[1:2] == [b"-m"] else args[0]
        kind = "java" if args[0].endswith(b"java") else module.decode().rsplit(".", 1)[-1]
        count, rss_mb, pss_mb = out.get(kind, (0, 0.0, 0.0))
        out[kind] = (count + 1, rss_mb + rss / 1024, pss_mb + pss / 1024)
    return out


def _kib(path: Path, field: str) -> int:
    """The ``field`` line's kB of a /proc file (0 when absent)."""
    for line in path.read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def describe_rss(pid: int) -> str:
    """The job tree's RSS and PSS, and per kind of process: ``count x kind RSS MB``."""
    kinds = sorted(tree_rss_by_kind(pid).items(), key=lambda kv: -kv[1][1])
    parts = ", ".join(f"{n} x {kind} {rss:,.0f}" for kind, (n, rss, _) in kinds)
    rss, pss = (sum(v[i] for _, v in kinds) for i in (1, 2))
    return f"operator job RSS {rss:,.0f} MB, PSS {pss:,.0f} MB ({parts})"


def du_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def plain_produce(root: Path, count: int) -> None:
    """The baseline of the same run: plain HTTP JSON batch produce (5,000 per request)."""
    with running_broker(root) as broker, broker.http as http:
        started = time.monotonic()
        produce(http, "plain", count, 0)
        seconds = time.monotonic() - started
        rate = count / seconds
        print(f"plain batch produce (baseline): {count:,} msgs in {seconds:.1f} s -> {rate:,.0f} msg/s")


def throughput(root: Path, count: int, kind: str) -> None:
    """All ``count`` messages due together (level 1: 1 s after their store time; timer
    messages: one second a few seconds ahead); the rate counts from the due time."""
    with running_broker(root) as broker, broker.http as http:
        before = relocated(broker)
        if kind == "level":
            produce(http, "tput", count, 1)
            due_at = time.monotonic() + 1.0  # the level delay itself is not work
        else:  # one second, due once production has surely ended
            deliver_at = (int(time.time()) + int(count / 5_000) + 10) * 1000 + 500  # loaded machines
            produce(http, "tput", count, 0, deliver_at_ms=deliver_at)
            due_epoch_ms = (deliver_at // 1000 + 1) * 1000  # rounded up to the second
            due_at = time.monotonic() + (due_epoch_ms - time.time() * 1000) / 1000
            assert due_at > time.monotonic(), "production did not end before the due time"
        wait_until(lambda: relocated(broker) - before >= count, 900, f"{count} deliveries", poll_s=0.1)
        seconds = time.monotonic() - due_at
        print(
            f"resolution throughput ({kind}): {count:,} delayed msgs in {seconds:.2f} s after due -> "
            f"{count / seconds:,.0f} msg/s"
        )


#: A produce load beside the lateness run (``lateness-5k-loaded``): a process that posts plain
#: 1,000-message batches to the broker as fast as it is answered, until killed.
LOAD_SCRIPT = """
import sys, httpx
with httpx.Client(base_url=sys.argv[1], timeout=60) as http:
    body = {"messages": [{"body": "y" * 100}] * 1000}
    while True:
        http.post("/topics/load/messages:batch", json=body).raise_for_status()
"""


@contextmanager
def produce_load(url: str, processes: int) -> Iterator[None]:
    """``processes`` producers of plain messages to ``url`` for the block's duration."""
    loaders = [subprocess.Popen([sys.executable, "-c", LOAD_SCRIPT, url]) for _ in range(processes)]
    try:
        yield
    finally:
        for loader in loaders:
            loader.kill()
            loader.wait()


def topic_size(http: httpx.Client, topic: str) -> int:
    """Messages in ``topic`` (0 when it does not exist)."""
    resp = http.get(f"/topics/{topic}")
    if resp.status_code == 404:
        return 0
    resp.raise_for_status()
    return sum(int(q["max_offset"]) - int(q["min_offset"]) for q in resp.json().get("queue_offsets") or [])


def lateness(
    root: Path, rate: int, seconds: float, level: int = 2, delay_ms: int | None = None, loaders: int = 0
) -> None:
    """``rate`` delayed msg/s for ``seconds`` (level ``level``, or timer messages ``delay_ms``
    ahead), with ``loaders`` plain producers beside: lateness per message, and the operator
    job's RSS (whole process tree) at the end."""
    kind = f"level {level}" if delay_ms is None else f"timer +{delay_ms} ms"
    with running_broker(root) as broker, broker.http as http:
        with produce_load(broker.url, loaders):
            started = time.monotonic()
            sent = produce_at_rate(http, "late", rate, seconds, level if delay_ms is None else 0, delay_ms)
            loaded = os.getloadavg()[0]
            wait_until(lambda: relocated(broker) >= sent + 10, 600, f"{sent} deliveries", poll_s=0.5)
            if loaders:
                load_rate = topic_size(http, "load") / (time.monotonic() - started)
                kind += f", {loaders} plain producers beside ({load_rate:,.0f} msg/s), load {loaded:.1f}"
                kind += " at the end of sending"
        due, late = lateness_ms(http, "late", level, delay_ms)
        rss = describe_rss(broker.operators()["job"]["pid"])
        print(
            f"lateness at {rate:,} msg/s, {kind} ({sent:,} msgs): p50 {np.percentile(late, 50):.0f} ms, "
            f"p99 {np.percentile(late, 99):.0f} ms, max {late.max()} ms, early {(late < 0).sum()} "
            f"(p99 per 10 s of due time: {p99_by_window(due, late)} ms); {rss}; load {os.getloadavg()[0]:.1f}"
        )


def hot_second(root: Path, count: int) -> None:
    """``count`` timer messages all due in one second (``deliver_at_ms`` = one exact second)."""
    with running_broker(root) as broker, broker.http as http:
        deliver_at = (int(time.time()) + 60) * 1000 + 500  # rounded up: due at the next second
        produce(http, "hot", count, 0, deliver_at_ms=deliver_at)
        due = deliver_at // 1000 * 1000 + 1000
        assert time.time() * 1000 < due, "production did not end before the hot second"
        wait_until(lambda: relocated(broker) >= count + 10, 600, f"{count} deliveries", poll_s=0.5)
        delivered = read_all(http, "hot").column("store_timestamp").to_numpy()
        late = (delivered - due) / 1000
        p50, p99, early = np.percentile(late, 50), np.percentile(late, 99), int((late < 0).sum())
        print(
            f"hot second: {count:,} timer msgs due in one second -> all delivered {late.max():.1f} s after "
            f"due (p50 {p50:.1f} s, p99 {p99:.1f} s, early {early})"
        )


def pending_million(root: Path, count: int, kind: str = "level") -> None:
    with running_broker(root) as broker, broker.http as http:
        if kind == "level":
            produce(http, "far", count, 18)  # 2 h: all stay pending
        else:  # timer messages spread over an hour
            now_s = int(time.time())
            for lo in range(0, count, 5000):
                produce(http, "far", min(5000, count - lo), 0, deliver_at_ms=(now_s + 600 + lo % 3600) * 1000)
        wait_until(
            lambda: broker.delay_operator().get("pending", 0) >= count, 900, f"{count} pending", poll_s=1
        )
        time.sleep(5)
        job = broker.operators()["job"]["pid"]
        rss, checkpoint, store = describe_rss(job), du_mb(broker.checkpoint_dir), du_mb(broker.store_dir)
        print(f"{count:,} pending ({kind}): {rss}, checkpoint {checkpoint:,.1f} MB, store {store:,.0f} MB")
        # Spark keeps the Python workers that planned the queries (finding, creating and
        # planning the data source: three ~150 MB processes) until their pool is idle a minute;
        # the job then stops their daemons (streaming/operators/daemons.py): the steady state.
        time.sleep(65)
        print(f"{count:,} pending ({kind}), a minute later: {describe_rss(job)}")
        time.sleep(60)
        print(f"{count:,} pending ({kind}), two minutes later: {describe_rss(job)}")


def recovery(root: Path, count: int, level: int = 3, down_s: float = 11) -> None:
    """``count`` messages of ``level``, the broker killed once the resolver holds them, down
    ``down_s``, so they are overdue when it starts again. Level 3 (10 s) is within the wheel's
    look-ahead: decided before the kill, replayed by the restarted broker. Level 4 (30 s) is
    not: nothing is decided at the kill, and the restarted operator job decides them."""
    with running_broker(root) as broker, broker.http as http:
        produce(http, "rec", count, level)

        def held() -> bool:  # in the resolver's state, or decided ahead into the wheel
            op = broker.delay_operator()
            return bool(op.get("pending", 0) >= count or op.get("wheel_pending"))

        wait_until(held, 300, "pending", poll_s=0.2)
        decided = int(broker.delay_operator().get("wheel_pending") or 0)
        broker.process.send_signal(signal.SIGKILL)
        broker.process.wait()
    print(f"recovery (level {level}, down {down_s:.0f} s): {decided:,} wheel entries at the kill")
    time.sleep(down_s)
    restart = time.monotonic()
    again = start_broker(root, extra_args=SERVE_ARGS, port=int(broker.url.rsplit(":", 1)[1]))
    try:
        # The first overdue delivery: by the wheel (decisions written before the kill) or by the
        # restarted job's first batch, whichever comes first.
        wait_until(lambda: read_all(again.http, "rec").num_rows > 0, 300, "the first delivery", poll_s=0.1)
        first = time.monotonic() - restart
        wait_until(lambda: relocated(again) >= count, 300, "all deliveries", poll_s=0.2)
        print(f"recovery (level {level}): broker restart to first delivery {first:.1f} s; "
              f"{count:,} overdue delivered by {time.monotonic() - restart:.1f} s")  # fmt: skip
    finally:
        again.stop(signal.SIGTERM)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="*", default=None, help="scenarios to run (default: all)")
    parser.add_argument(
        "--serve-args", default="", help="extra sparkmq serve flags, e.g. '--wheel-lookahead 10s'"
    )
    args = parser.parse_args()
    global SERVE_ARGS
    SERVE_ARGS = tuple(args.serve_args.split())
    scale = 0.2 if args.quick else 1.0
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    print(f"operators bench: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, serve args {SERVE_ARGS}")
    root = Path(tempfile.mkdtemp(prefix="sparkmq-ops-bench-"))
    scenarios: tuple[tuple[str, Callable[[Path], None]], ...] = (
        ("plain", lambda d: plain_produce(d, int(300_000 * scale))),
        ("throughput-level", lambda d: throughput(d, int(300_000 * scale), "level")),
        ("throughput-timer", lambda d: throughput(d, int(300_000 * scale), "timer")),
        ("lateness-5k", lambda d: lateness(d, 5_000, 60 * scale)),
        ("lateness-5k-timer", lambda d: lateness(d, 5_000, 60 * scale, delay_ms=5_000)),
        ("lateness-5k-loaded", lambda d: lateness(d, 5_000, 60 * scale, loaders=2)),
        ("hot", lambda d: hot_second(d, int(100_000 * scale))),
        ("pending", lambda d: pending_million(d, int(1_000_000 * scale))),
        ("pending-timer", lambda d: pending_million(d, int(1_000_000 * scale), "timer")),
        ("recovery", lambda d: recovery(d, int(20_000 * scale))),
        ("recovery-undecided", lambda d: recovery(d, int(20_000 * scale), level=4, down_s=31)),
    )
    try:
        for name, run in scenarios:
            if args.only is not None and name not in args.only:
                continue
            directory = root / name
            directory.mkdir()
            try:
                run(directory)
            except (AssertionError, httpx.HTTPError, subprocess.SubprocessError) as exc:
                print(f"{name}: failed: {exc}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
