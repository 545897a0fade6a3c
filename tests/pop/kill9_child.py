"""The child of tests/pop/test_kill9.py: a POP consumer loop over a store, printing its acks.

``python -m tests.pop.kill9_child STORE_DIR``: receives (8 at a time, 2 s invisible) and acks
about two in three, printing ``TRY body...`` before each ack and ``ACK body...`` once the
service answered it (flushed at once), until killed.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from broker.pop import PopConfig, PopService
from store import MessageStore
from tests.support.stores import light_config


def main(store_dir: Path) -> None:
    store = MessageStore.open(light_config(store_dir))
    service = PopService(store, PopConfig(expiry_tick_ms=50))
    rng = random.Random(7)
    print("READY", flush=True)
    while True:
        got = service.receive("g", "t", 8, 2_000, wait_ms=200)
        chosen = [r for r in got if rng.random() < 0.67]
        if not chosen:
            continue
        names = " ".join(r.message.body.decode() for r in chosen)
        print(f"TRY {names}", flush=True)
        results = service.ack("g", [r.receipt_handle for r in chosen])
        ok = " ".join(r.message.body.decode() for r, res in zip(chosen, results, strict=True) if res.ok)
        print(f"ACK {ok}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
