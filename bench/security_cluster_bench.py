"""Sync replication over mutual TLS vs plain TCP (issue 29's "sync replication over mutual TLS"
figure; goal >= 0.85x).

    python -m bench.security_cluster_bench [--seconds 3] [--rounds 2] [--dir /tmp/sparkmq-sec-bench]

A master and one SYNC slave (``min_insync`` 2: every put waits for the slave's ack) in this
process, over TCP on 127.0.0.1, stores on disk; once on plain TCP and once with mutual TLS
(a throw-away CA, :mod:`broker.security.certs`). Measured in interleaved rounds (the machine is
shared): batched puts (``put_batch`` of 100 x 1 KiB) and single puts (1 KiB), msg/s, and the
ratio TLS / plain for each. Benchmarks are not tests: nothing here asserts.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.ha_replica import bench_config
from broker.security.certs import issue_cert, make_ca
from store import Message, MessageStore
from store.ha import HAConfig, InMemorySyncStateAuthority, ReplicaController, ReplicationMode, SyncState
from store.ha.tls import HATls

BODY = b"x" * 1024
BATCH = 100


def _certificates(root: Path) -> dict[int, HATls]:
    ca = make_ca("bench CA")
    shutil.rmtree(root, ignore_errors=True)  # a former run's keys (they are written exclusively)
    root.mkdir(parents=True)
    ca_file = root / "ca.pem"
    ca_file.write_bytes(ca.cert_pem)
    out = {}
    for member in (1, 2):
        cert, key = root / f"m{member}.pem", root / f"m{member}-key.pem"
        issue_cert(ca, f"member-{member}", ["127.0.0.1"]).write(cert, key)
        out[member] = HATls(cert, key, ca_file)
    return out


@contextmanager
def _pair(root: Path, tls: dict[int, HATls] | None) -> Iterator[MessageStore]:
    """A master (member 1) with its SYNC slave (member 2) caught up; yields the master's store."""
    shutil.rmtree(root, ignore_errors=True)
    authority = InMemorySyncStateAuthority(SyncState(frozenset({1, 2}), 1, 0))
    stores, controllers = [], []
    try:
        for member in (1, 2):
            store = MessageStore.open(bench_config(root / f"m{member}", replicated=True))
            config = HAConfig(
                broker_id=member,
                replication=ReplicationMode.SYNC,
                min_insync=2,
                tls=None if tls is None else tls[member],
            )
            check = None if tls is None else (lambda m, identity: identity == f"member-{m}")
            controller = ReplicaController(store, config, authority, identity_check=check)
            controller.start()
            stores.append(store)
            controllers.append(controller)
        controllers[0].become_master(1)
        controllers[1].become_slave(controllers[0].ha_address, 1)
        deadline = time.monotonic() + 30
        while not controllers[1].master_connected and time.monotonic() < deadline:
            time.sleep(0.05)
        stores[0].put_message(Message(topic="bench", body=BODY))  # the first ack: in sync
        yield stores[0]
    finally:
        for controller in reversed(controllers):
            controller.close()
        for store in stores:
            store.destroy()


def _rate(seconds: float, put: Callable[[], int]) -> float:
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        done += put()
    return done / (time.perf_counter() - start)


def _measure(store: MessageStore, seconds: float) -> tuple[float, float]:
    def batched() -> int:
        store.put_batch("bench", [BODY] * BATCH, queue_ids=[0] * BATCH)
        return BATCH

    def single() -> int:
        store.put_message(Message(topic="bench", body=BODY))
        return 1

    return _rate(seconds, batched), _rate(seconds, single)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "sparkmq-sec-bench")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    tls = _certificates(args.dir / "certs")
    results: dict[str, list[tuple[float, float]]] = {"plain": [], "mtls": []}
    for _ in range(args.rounds):
        for label, setting in (("plain", None), ("mtls", tls)):
            with _pair(args.dir / label, setting) as store:
                results[label].append(_measure(store, args.seconds))
    for index, kind in enumerate(("batched 100 x 1 KiB", "single 1 KiB")):
        plain = statistics.median(r[index] for r in results["plain"])
        mtls = statistics.median(r[index] for r in results["mtls"])
        print(f"sync replication, {kind}: plain {plain:,.0f} msg/s, mutual TLS {mtls:,.0f} msg/s, "
              f"ratio {mtls / plain:.2f}x (goal >= 0.85x)")  # fmt: skip


if __name__ == "__main__":
    main()
