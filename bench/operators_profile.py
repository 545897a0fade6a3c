"""Where one delay-resolver micro-batch spends its time (issue 23's profile).

For each input size (20,000 and 100,000 parked messages by default) and kind (level / timer):

1. an in-process broker (``--operators off``; level 1 = 15 s) on a fresh store, and ``n`` parked
   messages appended in-process, all due ~15 s later;
2. the operator job's delay query (the real :func:`streaming.operators.runtime.start_delay_query`
   pieces, path mode, trigger 500 ms) started on a warm SparkSession; the resolver's processor
   wrapped by :class:`Profiled`, which times every state call, timer call and handler call in the
   Python workers and appends one JSON line per handler call to a file;
3. a ``foreachBatch`` poster like the runtime's, timing the batch's computation (``toArrow``: source
   read, shuffle, transformWithState, collection to the driver) and its POST separately;
4. the broker's ``commit_batch`` wrapped: wall time, and a cProfile of the batches that relocate.

The source read alone is measured too (the store read that a ``read()`` task does, in process, and
the Spark batch read of the same rows). Prints a markdown report (``--out`` writes it to a file).

    python -m bench.operators_profile --out docs/profiles/operators-delay-before.md
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from store import SCHEDULE_TOPIC, TIMER_TOPIC, Message, StoreReader
from streaming.operators import delay, runtime
from tests.streaming.conftest import Broker
from tests.support.waiting import wait_until

DELAY_S = 15
PRODUCE_CHUNK = 5000


# -- the processor wrapper (runs in the Python workers) ----------------------------------------
class _Stats:
    def __init__(self) -> None:
        self.calls: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])

    def add(self, name: str, seconds: float) -> None:
        entry = self.calls[name]
        entry[0] += 1
        entry[1] += seconds


class _TimedProxy:
    """Times every method call of ``target`` under ``prefix.method``; iterators are drained
    inside the timing (a ListState's ``get`` streams its rows)."""

    def __init__(
        self, target: Any, prefix: str, stats: _Stats, wrap: Callable[[str, Any], Any] | None = None
    ):
        self._target, self._prefix, self._stats, self._wrap = target, prefix, stats, wrap

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            result = attr(*args, **kwargs)
            if isinstance(result, Iterator):
                result = list(result)
            self._stats.add(f"{self._prefix}.{name}", time.perf_counter() - started)
            return self._wrap(name, result) if self._wrap is not None else result

        return timed


class Profiled:
    """A StatefulProcessor wrapping another one, timing its state and timer calls."""

    def __new__(cls, inner: Any, out_path: str) -> Any:
        from pyspark.sql.streaming.stateful_processor import StatefulProcessor

        class _Profiled(StatefulProcessor):  # type: ignore[misc]
            def __init__(self) -> None:
                self.inner, self.out_path = inner, out_path

            def init(self, handle: Any) -> None:
                self.stats = _Stats()

                def wrap_state(name: str, result: Any) -> Any:
                    if name.startswith("get") and name.endswith("State"):
                        return _TimedProxy(result, name[3:-5].lower(), self.stats)
                    return result

                self.inner.init(_TimedProxy(handle, "handle", self.stats, wrap_state))

            def _run(self, kind: str, key: Any, produce: Callable[[], Any], now: int) -> Iterator[Any]:
                before = {k: tuple(v) for k, v in self.stats.calls.items()}
                started = time.perf_counter()
                out = list(produce() or ())
                wall = time.perf_counter() - started
                calls = {
                    k: [v[0] - before.get(k, (0, 0.0))[0], v[1] - before.get(k, (0, 0.0))[1]]
                    for k, v in self.stats.calls.items()
                    if v[0] != before.get(k, (0, 0.0))[0]
                }
                rows_out = sum(len(f) for f in out)
                line = {"kind": kind, "now": now, "pid": os.getpid(), "wall_s": wall, "rows_out": rows_out,
                        "calls": calls, "key": [str(k) for k in key]}  # fmt: skip
                with open(self.out_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(line) + "\n")
                yield from out

            def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:  # noqa: N802, N803
                stats = self.stats

                def timed_rows() -> Iterator[Any]:
                    it = iter(rows)
                    while True:
                        started = time.perf_counter()
                        try:
                            frame = next(it)
                        except StopIteration:
                            stats.add("input.rows_to_pandas", time.perf_counter() - started)
                            return
                        stats.add("input.rows_to_pandas", time.perf_counter() - started)
                        stats.calls["input.row_count"][0] += len(frame)
                        yield frame

                now = timerValues.getCurrentProcessingTimeInMs()
                return self._run(
                    "input", key, lambda: self.inner.handleInputRows(key, timed_rows(), timerValues), now
                )

            def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Any:  # noqa: N802, N803
                now = timerValues.getCurrentProcessingTimeInMs()
                return self._run(
                    "timer", key,
                    lambda: self.inner.handleExpiredTimer(key=key, timerValues=timerValues,
                                                          expiredTimerInfo=expiredTimerInfo), now,
                )  # fmt: skip

            def close(self) -> None:
                self.inner.close()

        return _Profiled()


# -- the driver side ----------------------------------------------------------------------------
class BrokerTimer:
    """Wraps the in-process broker's ``OperatorBoard.commit_batch``: wall time per batch, and a
    cProfile of each batch that relocates something."""

    def __init__(self, board: Any) -> None:
        self.rows: list[dict[str, Any]] = []
        self.profiles: list[pstats.Stats] = []
        original = board.commit_batch
        lock = threading.Lock()

        def timed(operator: str, batch_id: int, table: pa.Table) -> Any:
            profiler = cProfile.Profile()
            started = time.perf_counter()
            with lock:
                outcome = profiler.runcall(original, operator, batch_id, table)
            wall = time.perf_counter() - started
            self.rows.append({"batch_id": batch_id, "rows": table.num_rows, "wall_s": wall,
                              "appended": outcome.appended})  # fmt: skip
            if outcome.appended:
                self.profiles.append(pstats.Stats(profiler))
            return outcome

        board.commit_batch = timed


def _poster(client: runtime.BrokerClient, timings: list[dict[str, Any]]) -> Callable[[Any, int], None]:
    """The runtime's poster (:func:`streaming.operators.runtime.batch_poster`), timed in parts."""

    def post(df: Any, batch_id: int) -> None:
        started = time.perf_counter()
        table = df.toArrow()
        computed = time.perf_counter()
        if table.num_rows:
            table = table.select(list(runtime.POST_COLUMNS))
            client.post_batch(runtime.DELAY_OPERATOR, batch_id, table)
        timings.append({"batch_id": batch_id, "rows": table.num_rows, "compute_s": computed - started,
                        "post_s": time.perf_counter() - computed})  # fmt: skip

    return post


def _produce(store: Any, kind: str, n: int) -> None:
    for lo in range(0, n, PRODUCE_CHUNK):
        count = min(PRODUCE_CHUNK, n - lo)
        if kind == "level":
            messages = [Message(topic="orders", body=b"x" * 100, delay_level=1) for _ in range(count)]
        else:
            at = str(store.now_ms() + DELAY_S * 1000)
            messages = [
                Message(topic="orders", body=b"x" * 100, properties={"TIMER_DELIVER_MS": at})
                for _ in range(count)
            ]
        store.put_messages(messages)


def _source_read(
    spark: Any, store_dir: Path, kind: str, n: int, settings: delay.DelaySettings
) -> dict[str, float]:
    topic, queue = (SCHEDULE_TOPIC, 0) if kind == "level" else (TIMER_TOPIC, 0)
    with StoreReader(store_dir) as reader:
        started = time.perf_counter()
        got = reader.read_batch(topic, queue, 0, n).batch.num_rows
        store_read = time.perf_counter() - started
    assert got == n, (got, n)
    frame = (
        spark.read.format("sparkmq").option("path", str(store_dir)).option("topics", topic)
        .option("systemTopics", "true").load()
    )  # fmt: skip
    started = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    spark_read = time.perf_counter() - started
    started = time.perf_counter()
    delay.resolver_input(frame, settings).write.format("noop").mode("overwrite").save()
    spark_input = time.perf_counter() - started
    return {"store_read_s": store_read, "spark_read_s": spark_read, "spark_resolver_input_s": spark_input}


def profile_one(spark: Any, root: Path, kind: str, n: int) -> dict[str, Any]:
    store_dir, checkpoint = root / "store", root / "checkpoints"
    broker = Broker(store_dir, delay_levels=f"{DELAY_S}s")
    try:
        app_broker = broker.server.app.state.broker
        timer = BrokerTimer(app_broker.operators)
        config = runtime.JobConfig(
            endpoint=broker.url, checkpoint_dir=checkpoint, path=str(store_dir), shards=2
        )
        client = runtime.BrokerClient(config.endpoint)
        settings = runtime.delay_settings(client.settings(), config.shards)
        produced_at = time.monotonic()
        _produce(app_broker.store, kind, n)
        produce_s = time.monotonic() - produced_at
        read = _source_read(spark, store_dir, kind, n, settings)
        out_path = str(root / "handlers.jsonl")
        original = delay.DelayResolver
        delay.DelayResolver = lambda s: Profiled(original(s), out_path)  # type: ignore[assignment,misc]
        timings: list[dict[str, Any]] = []
        try:
            topics = f"{SCHEDULE_TOPIC},{TIMER_TOPIC}"
            parked = runtime._system_input(spark, config, topics, max(settings.burst_cap, 10_000))
            query = runtime._start(delay.resolve(parked, settings), "delay", config, _poster(client, timings))
        finally:
            delay.DelayResolver = original  # type: ignore[misc]
        state = app_broker.operators.state("delay")
        try:
            wait_until(lambda: state.relocated_total >= n, 900, f"{n} relocations", poll_s=0.2)
            time.sleep(1.5)  # the batch's progress event
            progress = list(query.recentProgress)
        finally:
            query.stop()
        handlers = [json.loads(line) for line in Path(out_path).read_text().splitlines()]
        return {"kind": kind, "n": n, "produce_s": produce_s, "read": read, "progress": progress,
                "timings": timings, "broker": timer.rows, "profiles": timer.profiles,
                "handlers": handlers}  # fmt: skip
    finally:
        broker.stop()


# -- the report ----------------------------------------------------------------------------------
def _batch_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The batches that did work: read input rows, or relocated."""
    posts = {t["batch_id"]: t for t in result["timings"]}
    brokers = {b["batch_id"]: b for b in result["broker"]}
    out = []
    for p in result["progress"]:
        bid = p["batchId"]
        relocated = brokers.get(bid, {}).get("appended", 0)
        if not p.get("numInputRows") and not relocated:
            continue
        out.append(
            {
                "progress": p,
                "post": posts.get(bid, {}),
                "broker": brokers.get(bid, {}),
                "relocated": relocated,
            }
        )
    return out


def _handler_summary(handlers: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    rows = [h for h in handlers if h["kind"] == kind]
    calls: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for h in rows:
        for name, (count, seconds) in h["calls"].items():
            calls[name][0] += count
            calls[name][1] += seconds
    return {"invocations": len(rows), "wall_s": sum(h["wall_s"] for h in rows),
            "rows_out": sum(h["rows_out"] for h in rows), "calls": dict(calls),
            "workers": len({h["pid"] for h in rows})}  # fmt: skip


def report(results: list[dict[str, Any]]) -> str:
    lines = [
        "# Delay resolver: one micro-batch, profiled",
        "",
        f"`python -m bench.operators_profile` on {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}; local[2], 2 shuffle partitions, RocksDB state, trigger 500 ms, "
        "path mode.",
        "",
    ]
    for r in results:
        lines += [f"## {r['kind']} messages, {r['n']:,} rows", ""]
        read = r["read"]
        lines += [
            f"* produced in-process in {r['produce_s']:.2f} s",
            f"* source read alone: store `read_batch` of the {r['n']:,} records "
            f"{read['store_read_s'] * 1000:.0f} ms; Spark batch read to a noop sink "
            f"{read['spark_read_s']:.2f} s, with the resolver's input projection "
            f"{read['spark_resolver_input_s']:.2f} s",
            "",
            "| batch | input rows | relocated | trigger total | latestOffset | planning | getBatch "
            "| walCommit | "
            "addBatch | commitOffsets | toArrow (read+shuffle+TWS) | POST | broker commit |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for b in _batch_rows(r):
            d = b["progress"].get("durationMs", {})
            lines.append(
                f"| {b['progress']['batchId']} | {b['progress'].get('numInputRows', 0):,} "
                f"| {b['relocated']:,} | "
                + " | ".join(f"{d.get(k, 0) / 1000:.2f}" for k in
                             ("triggerExecution", "latestOffset", "queryPlanning", "getBatch", "walCommit",
                              "addBatch",
                              "commitOffsets"))
                + f" | {b['post'].get('compute_s', 0):.2f} | {b['post'].get('post_s', 0):.2f} | "
                f"{b['broker'].get('wall_s', 0):.2f} |"
            )  # fmt: skip
        lines.append("")
        for b in _batch_rows(r):
            ops = b["progress"].get("stateOperators") or [{}]
            op = ops[0]
            custom = op.get("customMetrics", {})
            lines.append(
                f"* batch {b['progress']['batchId']} state operator: rows total {op.get('numRowsTotal')}, "
                "updated "
                f"{op.get('numRowsUpdated')}, allUpdatesTimeMs {op.get('allUpdatesTimeMs')}, commitTimeMs "
                f"{op.get('commitTimeMs')}, memory {op.get('memoryUsedBytes', 0) / 2**20:.1f} MiB, timers "
                f"registered {custom.get('numRegisteredTimers')}"
            )
        lines.append("")
        for kind in ("input", "timer"):
            s = _handler_summary(r["handlers"], kind)
            if not s["invocations"]:
                continue
            lines += [
                f"transformWithState `{'handleInputRows' if kind == 'input' else 'handleExpiredTimer'}`: "
                f"{s['invocations']} calls (keys) in {s['workers']} workers, {s['wall_s']:.2f} s summed over "
                f"the workers (they run in parallel), {s['rows_out']:,} rows out, "
                f"{s['wall_s'] / max(s['invocations'], 1) * 1000:.1f} ms per call",
                "",
                "| call | count | total s | per call µs |",
                "|---|---|---|---|",
            ]
            for name, (count, seconds) in sorted(s["calls"].items(), key=lambda kv: -kv[1][1]):
                if name == "input.row_count":
                    lines.append(f"| input rows | {count:,} | | |")
                    continue
                lines.append(f"| {name} | {count:,} | {seconds:.3f} | {seconds / max(count, 1) * 1e6:.0f} |")
            accounted = sum(v[1] for k, v in s["calls"].items())
            lines += [f"| handler's own Python (rest) | | {s['wall_s'] - accounted:.3f} | |", ""]
        for stats in r["profiles"]:
            buf = io.StringIO()
            stats.stream = buf
            stats.sort_stats("cumulative").print_stats(25)
            lines += ["Broker `commit_batch` (cProfile, cumulative, top 25):", "", "```",
                      *_trim_profile(buf.getvalue()), "```", ""]  # fmt: skip
    return "\n".join(lines) + "\n"


def _trim_profile(text: str) -> list[str]:
    out = []
    started = False
    for line in text.splitlines():
        if "ncalls" in line:
            started = True
        if started and line.strip():
            out.append(line.replace(str(Path(__file__).resolve().parents[1]) + "/", "")[:160])
        elif not started and "function calls" in line:
            out.append(line.strip())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--kinds", nargs="+", default=["level", "timer"], choices=["level", "timer"])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = Path(tempfile.mkdtemp(prefix="sparkmq-ops-profile-"))
    spark = runtime.session(runtime.JobConfig(endpoint="", checkpoint_dir=root, shards=2))
    spark.sparkContext.setLogLevel("ERROR")
    results = []
    try:
        warm = root / "warm-up"
        warm.mkdir()
        profile_one(spark, warm, "level", 1000)  # Python workers started, first stateful batches run
        for kind in args.kinds:
            for n in args.rows:
                directory = root / f"{kind}-{n}"
                directory.mkdir()
                print(f"profiling {kind} x {n:,} ...", flush=True)
                results.append(profile_one(spark, directory, kind, n))
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    text = report(results)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
