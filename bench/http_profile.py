"""cProfile of the batch produce and pull routes' work, in process (no sockets): where a request's time goes.

    python -m bench.http_profile json          # 1,000 x 100 B per request (also ndjson)
    python -m bench.http_profile arrow         # 10,000 x 100 B, Arrow results
    python -m bench.http_profile pull          # Arrow pull of 50,000 x 100 B (read_batch + IPC)
    python -m bench.http_profile arrow --top 40 --requests 50

Runs what ``POST /topics/{topic}/messages:batch`` runs in its worker thread
(``local_produce.produce_batch_here``: decode, validate, store, render) on a temporary store,
prints the time per request beside in-process ``put_batch`` of the same bodies (for ``pull``:
``routers.queues._pull_arrow`` beside ``read_batch`` of the same 50,000 messages; interleaved,
medians; the thread's CPU time, which other load barely moves, and wall time, which includes
waiting for the GIL and the cores), then the profile sorted by cumulative time. The profiles
under ``docs/profiles/`` were made with it. Not a CI gate.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.http_bench import BODY, batch_request
from broker.config import ServerConfig
from ingest_api.http import local_produce
from ingest_api.http.routers import queues
from store import MessageStore, StoreConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("json", "ndjson", "arrow", "pull"))
    parser.add_argument("--requests", type=int, default=30, help="Requests per timing round and profiled.")
    parser.add_argument("--top", type=int, default=30, help="Functions printed.")
    args = parser.parse_args()
    size = {"arrow": 10_000, "pull": 50_000}.get(args.kind, 1000)
    raw, media = batch_request("arrow" if args.kind == "pull" else args.kind, min(size, 10_000))
    with tempfile.TemporaryDirectory(prefix="sparkmq-profile-") as directory:
        config = StoreConfig(store_dir=Path(directory), commitlog_file_size_bytes=1 << 30)
        with MessageStore.open(config) as store:
            store.create_topic("t", 4)
            broker: Any = SimpleNamespace(
                store=store, config=ServerConfig(store=config, max_batch_messages=100_000)
            )
            request = local_produce.BatchRequest("t", media, raw, args.kind == "arrow")
            bodies = [BODY] * size
            route_call = lambda: local_produce.produce_batch_here(broker, request)  # noqa: E731
            base_call, base_name = lambda: store.put_batch("t", bodies), "put_batch"
            if args.kind == "pull":
                store.create_topic("pulled", 1)
                store.put_batch("pulled", bodies)
                spec = queues._PullSpec("pulled", 0, 0, size, "*")
                route_call = lambda: queues._pull_arrow(store, spec)  # noqa: E731
                base_call = lambda: store.read_batch("pulled", 0, 0, max_messages=size)  # noqa: E731
                base_name = "read_batch"
            route: dict[str, list[float]] = {"wall": [], "cpu": []}
            baseline: dict[str, list[float]] = {"wall": [], "cpu": []}
            for _ in range(5):
                for samples, call in ((route, route_call), (baseline, base_call)):
                    started, cpu = time.perf_counter(), time.thread_time()
                    for _ in range(args.requests):
                        call()
                    samples["cpu"].append((time.thread_time() - cpu) / args.requests)
                    samples["wall"].append((time.perf_counter() - started) / args.requests)
            for clock in ("cpu", "wall"):
                per_request, per_put = statistics.median(route[clock]), statistics.median(baseline[clock])
                print(
                    f"{args.kind} batch of {size:,}, {clock:>4}: route {per_request * 1e3:.2f} ms, "
                    f"{base_name} {per_put * 1e3:.2f} ms, ratio {per_put / per_request:.2f} "
                    "(medians of 5 interleaved rounds)"
                )
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(args.requests):
                route_call()
            profile.disable()
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
