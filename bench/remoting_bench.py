"""The RocketMQ remoting door against the HTTP door of the same broker, in one run (ratios):

* remoting SEND_MESSAGE_V2 of single messages over 16 connections / HTTP single produce over
  16 keep-alive connections (goal >= 1.5x);
* remoting PULL_MESSAGE of 32-message batches / HTTP JSON pull of 32-message pages, one stream
  each, over the same stored messages (goal >= 1x);
* GET_ROUTEINFO_BY_TOPIC p99 over one connection (goal <= 2 ms).

    python -m bench.remoting_bench                 # starts `sparkmq serve --remoting-port` on a temp store
    python -m bench.remoting_bench --seconds 10 --rounds 3

The load is a small asyncio remoting client over the door's own codec
(:mod:`ingest_api.remoting.codec`). Client and server share the machine: figures are what this
box does end to end. The broker's CPU per message of the two send workloads (``/proc``) is
printed too: the broker is bound by the GIL, so that is what the send ratio follows. Not a CI
gate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import httpx

from bench.http_bench import (
    BODY,
    Figure,
    KeepAliveClient,
    _free_port,
    _percentile_ms,
    bench_single,
    cpu_seconds,
)
from ingest_api.remoting.codec import FRAME_LENGTH, RemotingCommand, decode_frame, encode_command, request
from ingest_api.remoting.codes import RequestCode, ResponseCode
from ingest_api.remoting.headers import SendMessageRequest, send_request_ext_fields

TOPIC = "bench_remoting"
PAGE = 32


@contextlib.contextmanager
def local_broker() -> Iterator[tuple[str, int, int]]:
    """`sparkmq serve --remoting-port` on a temporary store: (HTTP URL, remoting port, pid)."""
    with tempfile.TemporaryDirectory(prefix="sparkmq-bench-") as store_dir:
        port, remoting = _free_port(), _free_port()
        command = [
            sys.executable, "-m", "sparkmq.cli", "serve", "--store-dir", store_dir, "--port", str(port),
            "--remoting-port", str(remoting), "--log-level", "warning", "--operators", "off",
        ]  # fmt: skip
        process = subprocess.Popen(command, env=os.environ.copy())
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("broker did not start")
                time.sleep(0.1)
            yield url, remoting, process.pid
        finally:
            process.terminate()
            process.wait(timeout=60)


class Remoting:
    """One asyncio connection: a request out, its answer in (no pipelining)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.opaques = itertools.count(1)

    @classmethod
    async def open(cls, port: int) -> Remoting:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def call(self, code: int, fields: dict[str, str], body: bytes = b"") -> RemotingCommand:
        self.writer.write(encode_command(request(code, next(self.opaques), fields, body)))
        (length,) = FRAME_LENGTH.unpack(await self.reader.readexactly(FRAME_LENGTH.size))
        return decode_frame(await self.reader.readexactly(length))

    def close(self) -> None:
        self.writer.close()


def send_fields(queue_id: int = 0) -> dict[str, str]:
    header = SendMessageRequest(
        producer_group="bench", topic=TOPIC, default_topic="TBW102", default_topic_queue_nums=4,
        queue_id=queue_id, sys_flag=0, born_timestamp=int(time.time() * 1000), flag=0,
    )  # fmt: skip
    return send_request_ext_fields(header, v2=True)


async def bench_remoting_send(port: int, seconds: float, connections: int) -> Figure:
    fields = send_fields()

    async def one(stop_at: float) -> int:
        conn = await Remoting.open(port)
        done = 0
        try:
            while time.perf_counter() < stop_at:
                answer = await conn.call(RequestCode.SEND_MESSAGE_V2, fields, BODY)
                if answer.code != ResponseCode.SUCCESS:
                    raise RuntimeError(f"send answered {answer.code}: {answer.remark}")
                done += 1
        finally:
            conn.close()
        return done

    started = time.perf_counter()
    counts = await asyncio.gather(*(one(started + seconds) for _ in range(connections)))
    return Figure(
        f"SEND_MESSAGE_V2 ({connections} connections)", sum(counts), time.perf_counter() - started, "msg"
    )


async def bench_remoting_pull(port: int, total: int) -> Figure:
    conn = await Remoting.open(port)
    offset = pulled = 0
    started = time.perf_counter()
    try:
        while offset < total:
            fields = {"consumerGroup": "bench", "topic": TOPIC, "queueId": "0", "queueOffset": str(offset),
                      "maxMsgNums": str(PAGE), "sysFlag": "0", "commitOffset": "0",
                      "suspendTimeoutMillis": "0", "subVersion": "0"}  # fmt: skip
            answer = await conn.call(RequestCode.PULL_MESSAGE, fields)
            if answer.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"pull answered {answer.code}: {answer.remark}")
            pulled += min(PAGE, total - offset)
            offset = int(answer.ext_fields["nextBeginOffset"])
    finally:
        conn.close()
    return Figure(f"PULL_MESSAGE ({PAGE}/batch)", pulled, time.perf_counter() - started, "msg")


def bench_http_pull(url: str, total: int) -> Figure:
    client = KeepAliveClient(url)
    offset = pulled = 0
    started = time.perf_counter()
    try:
        while offset < total:
            path = f"/topics/{TOPIC}/queues/0/messages?offset={offset}&max_messages={PAGE}"
            status, body = client.request("GET", path, b"", {})
            if status != 200:
                raise RuntimeError(f"pull answered {status}")
            page = json.loads(body)
            pulled += len(page["messages"])
            offset = page["next_offset"]
    finally:
        client.close()
    return Figure(f"HTTP JSON pull ({PAGE}/page)", pulled, time.perf_counter() - started, "msg")


async def route_p99_ms(port: int, lookups: int) -> float:
    conn = await Remoting.open(port)
    latencies = []
    try:
        for _ in range(lookups):
            begun = time.perf_counter()
            answer = await conn.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
            latencies.append(time.perf_counter() - begun)
            if answer.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"route answered {answer.code}")
    finally:
        conn.close()
    return _percentile_ms(latencies, 0.99)


async def _send_round(
    url: str, port: int, pid: int, seconds: float, connections: int, http_first: bool
) -> dict[str, tuple[Figure, float]]:
    """One HTTP and one remoting send workload (in the order given), each with the broker's CPU
    per message: ``{"http": (figure, us), "remoting": (figure, us)}``."""
    out: dict[str, tuple[Figure, float]] = {}
    for kind in ("http", "remoting") if http_first else ("remoting", "http"):
        before = cpu_seconds(pid)
        if kind == "http":
            figure = await bench_single(url, TOPIC, seconds, connections)
        else:
            figure = await bench_remoting_send(port, seconds, connections)
        out[kind] = (figure, 1e6 * (cpu_seconds(pid) - before) / max(figure.count, 1))
    return out


async def run(
    url: str, port: int, pid: int, seconds: float, connections: int, lookups: int, rounds: int
) -> None:
    with httpx.Client(base_url=url) as http:
        http.put(f"/topics/{TOPIC}", json={"queues": 1}).raise_for_status()
    ratios: list[float] = []
    sends: dict[str, list[tuple[Figure, float]]] = {"http": [], "remoting": []}
    for n in range(rounds):  # alternating which goes first: neither always meets a fresh store
        done = await _send_round(url, port, pid, seconds, connections, http_first=n % 2 == 0)
        for kind, result in done.items():
            sends[kind].append(result)
            print(f"round {n + 1}: {result[0].line()}   broker CPU {result[1]:.0f} us/msg")
        ratios.append(done["remoting"][0].rate / done["http"][0].rate)
    stored = sum(f.count for results in sends.values() for f, _ in results)
    http_pull = bench_http_pull(url, stored)
    remoting_pull = await bench_remoting_pull(port, stored)
    p99 = await route_p99_ms(port, lookups)
    for figure in (http_pull, remoting_pull):
        print(figure.line())
    print(f"{'route lookup p99':<34} {p99:>14.3f} ms   ({lookups} lookups)")
    http_us = sum(us for _, us in sends["http"]) / rounds
    remoting_us = sum(us for _, us in sends["remoting"]) / rounds
    print(f"broker CPU per message: HTTP single produce {http_us:.0f} us, remoting send {remoting_us:.0f} us")
    each = ", ".join(f"{r:.2f}x" for r in ratios)
    median = statistics.median(ratios)
    print(f"remoting send / HTTP single produce: {median:.2f}x (median of {each}; goal >= 1.5x)")
    print(f"remoting pull / HTTP JSON pull:      {remoting_pull.rate / http_pull.rate:.2f}x (goal >= 1x)")
    print(f"route lookup p99:                    {p99:.3f} ms (goal <= 2 ms)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each send workload")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--lookups", type=int, default=2000)
    parser.add_argument(
        "--rounds", type=int, default=2, help="send rounds, alternating which door goes first"
    )
    args = parser.parse_args()
    with local_broker() as (url, port, pid):
        asyncio.run(run(url, port, pid, args.seconds, args.connections, args.lookups, args.rounds))


if __name__ == "__main__":
    main()
