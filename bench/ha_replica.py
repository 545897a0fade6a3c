"""A slave replica in its own process, for bench/ha_bench.py (as brokers run in production).

    python -m bench.ha_replica --dir D --master HOST:PORT [--epoch 1] [--broker-id 2] [--wait-for BYTES]

Opens a replicated store in ``--dir``, follows the master and prints ``READY``. With
``--wait-for`` it prints ``CAUGHT_UP <s>`` once it holds and has dispatched ``BYTES`` of
CommitLog (seconds since it started following), then ``INDEXED <s>`` once its key index caught
up, and exits; otherwise it replicates until its stdin closes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from store import MessageStore, StoreConfig
from store.ha import HAConfig, InMemorySyncStateAuthority, ReplicaController

MIB = 1 << 20


def bench_config(store_dir: Path, replicated: bool) -> StoreConfig:
    """The layout every store of the replication benchmark uses (256 MiB CommitLog files)."""
    return StoreConfig(
        store_dir=store_dir,
        commitlog_file_size_bytes=256 * MIB,
        consume_queue_units_per_file=300_000,
        index_hash_slots=500_000,
        index_max_entries=2_000_000,
        replicated=replicated,
    ).validate()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--master", required=True)
    parser.add_argument("--epoch", type=int, default=1)
    parser.add_argument("--broker-id", type=int, default=2)
    parser.add_argument("--wait-for", type=int, default=0)
    args = parser.parse_args()
    store = MessageStore.open(bench_config(args.dir, replicated=True))
    controller = ReplicaController(store, HAConfig(broker_id=args.broker_id), InMemorySyncStateAuthority())
    try:
        start = time.perf_counter()
        controller.become_slave(args.master, args.epoch)
        print("READY", flush=True)
        if args.wait_for:
            log = store.replica_log()
            while log.dispatched_to < args.wait_for:
                time.sleep(0.002)
            print(f"CAUGHT_UP {time.perf_counter() - start:.4f}", flush=True)
            store.wait_indexed(600)
            print(f"INDEXED {time.perf_counter() - start:.4f}", flush=True)
        else:
            sys.stdin.read()
    finally:
        controller.close()
        store.close()


if __name__ == "__main__":
    main()
