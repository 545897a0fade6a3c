"""Throughput of :func:`store.format.batch_decode.decode_records_to_arrow` (CommitLog bytes -> Arrow).

Builds one contiguous CommitLog slice of ``--records`` records (``--body-bytes`` bodies,
UNIQ_KEY/TAGS/KEYS/WAIT properties, one topic) with :func:`store.format.record.encode_record`: a
block of distinct records is encoded, tiled, and QUEUEOFFSET/PHYSICALOFFSET/STORETIMESTAMP
are patched per record. Decodes it ``--repeats`` times after a warm-up and prints msgs/s and
MB/s (record bytes) for the best and the median run, by wall clock and by this process's
CPU time (steadier when other processes share the cores). Not a CI gate.

    python -m bench.decode_bench [--records 2000000] [--body-bytes 100] [--repeats 3] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import numpy as np
import numpy.typing as npt

from store.format.batch_decode import decode_records_to_arrow
from store.format.record import (
    PHYSICAL_OFFSET_POS,
    QUEUE_OFFSET_POS,
    STORE_TIMESTAMP_POS,
    RecordFields,
    encode_record,
)

BLOCK_RECORDS = 4096
BASE_TIMESTAMP_MS = 1_763_700_000_000


def build_slice(
    records: int, body_bytes: int, seed: int = 7
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """(slice bytes, record starts) for ``records`` adjacent records."""
    rng = np.random.default_rng(seed)
    block: list[bytes] = []
    for i in range(min(BLOCK_RECORDS, records)):
        fields = RecordFields(
            topic="orders",
            body=rng.integers(0, 256, body_bytes, dtype=np.uint8).tobytes(),
            queue_id=i % 8,
            properties={
                "UNIQ_KEY": f"0A000001{i:024X}",
                "TAGS": "paid" if i % 3 else "refunded",
                "KEYS": f"order-{i:07d}",
                "WAIT": "true",
            },
            born_timestamp_ms=BASE_TIMESTAMP_MS,
            store_host=("10.0.0.7", 10911),
        )
        block.append(encode_record(fields))
    sizes = np.array([len(r) for r in block], dtype=np.int64)
    copies = -(-records // len(block))
    data = np.frombuffer(b"".join(block) * copies, dtype=np.uint8).copy()
    starts = np.zeros(len(block) * copies, dtype=np.int64)
    np.cumsum(np.tile(sizes, copies)[:-1], out=starts[1:])
    starts = starts[:records]
    data = data[: int(starts[-1] + sizes[(records - 1) % len(block)])]
    _patch_i64(data, starts + QUEUE_OFFSET_POS, np.arange(records, dtype=np.int64))
    _patch_i64(data, starts + PHYSICAL_OFFSET_POS, starts)
    _patch_i64(data, starts + STORE_TIMESTAMP_POS, BASE_TIMESTAMP_MS + np.arange(records, dtype=np.int64))
    return data, starts


def _patch_i64(
    data: npt.NDArray[np.uint8], positions: npt.NDArray[np.int64], values: npt.NDArray[np.int64]
) -> None:
    """Write big-endian int64 ``values`` at byte ``positions``."""
    window = np.ndarray((len(data) - 7,), dtype=">i8", buffer=data, strides=(1,))
    window[positions] = values


def run(records: int, body_bytes: int, repeats: int, profile: bool) -> None:
    t0 = time.perf_counter()
    data, starts = build_slice(records, body_bytes)
    print(f"built {records:,} records ({len(data) / 1e6:.0f} MB) in {time.perf_counter() - t0:.1f} s")
    # Warm-up, twice: each run below holds the previous batch while decoding the next, and the
    # first touch of memory the process never used is very slow on a VM (~3 us per 4 KiB page).
    batch = decode_records_to_arrow(data, starts)
    batch = decode_records_to_arrow(data, starts)
    wall: list[float] = []
    cpu: list[float] = []
    for i in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        batch = decode_records_to_arrow(data, starts)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        print(f"run {i + 1}: {wall[-1] * 1e3:6.0f} ms wall, {cpu[-1] * 1e3:6.0f} ms CPU")
    assert batch.num_rows == records
    for label, times in (("wall", wall), ("CPU ", cpu)):
        best, median = min(times), statistics.median(times)
        print(f"{label} best  : {_rates(records, len(data), best)}")
        print(f"{label} median: {_rates(records, len(data), median)}")
    if profile:
        profiler = cProfile.Profile()
        profiler.runcall(decode_records_to_arrow, data, starts)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)


def _rates(records: int, nbytes: int, seconds: float) -> str:
    return f"{records / seconds / 1e6:5.2f} M msgs/s  {nbytes / seconds / 1e6:6.0f} MB/s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one more run")
    args = parser.parse_args()
    run(args.records, args.body_bytes, args.repeats, args.profile)


if __name__ == "__main__":
    main()
