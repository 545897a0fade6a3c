"""What security costs, as ratios against plaintext measured in the same run (issue 29).

    python -m bench.security_bench                  # two `sparkmq serve` children on temp stores
    python -m bench.security_bench --seconds 2 --rounds 1   # a short smoke run

Two brokers run side by side: one plaintext with auth off, one with ``--auth-file``,
``--tls-cert``/``--tls-key`` (a throw-away CA) and a SASL_SSL Kafka listener. Printed:

* HTTP JSON batch produce (1000 x 100-byte messages) over TLS with a token vs plaintext;
* HTTP single produce over TLS with a token vs plaintext (keep-alive connections);
* confluent-kafka produce over SASL_SSL SCRAM-SHA-512 vs PLAINTEXT;
* SCRAM-SHA-512 logins per second: the server's side of the exchange (in process, the client's
  PBKDF2 done once), which is what a login costs the broker.

Client and server share the machine, as in :mod:`bench.http_bench`. Not a CI gate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvloop
from confluent_kafka import Producer

from bench.http_bench import BODY, Figure, _free_port, batch_request
from broker.security import (
    ScramMechanism,
    ScramServer,
    User,
    UserTable,
    hash_token,
    make_credential,
    write_users,
)
from broker.security.certs import issue_cert, make_ca
from broker.security.scram_format import (
    client_key,
    format_client_final,
    format_client_first,
    parse_server_first,
    salted_password,
    xor,
)

PASSWORD = "bench-password-0001"
TOKEN = "bench-token-000000000000000001"
SHA512 = ScramMechanism.SHA_512


@dataclass(frozen=True)
class Broker:
    http_url: str
    kafka: str
    ssl_context: ssl.SSLContext | None
    ca_file: Path | None


def _write_security(folder: Path) -> tuple[Path, Path, Path, Path]:
    """(users file, CA, certificate, key): one superuser with a token and SCRAM keys."""
    scram = {m: make_credential(m, PASSWORD) for m in ScramMechanism}
    users = UserTable((User("bench", token_hashes=(hash_token(TOKEN),), scram=scram, superuser=True),))
    write_users(folder / "users.json", users)
    authority = make_ca("sparkmq bench CA")
    (folder / "ca.pem").write_bytes(authority.cert_pem)
    leaf = issue_cert(authority, "bench-broker", ["127.0.0.1", "localhost"])
    leaf.write(folder / "broker.pem", folder / "broker-key.pem")
    return folder / "users.json", folder / "ca.pem", folder / "broker.pem", folder / "broker-key.pem"


@contextlib.contextmanager
def serve(secured: bool) -> Iterator[Broker]:
    """A `sparkmq serve` child (HTTP and Kafka), plaintext or secured; stopped with SIGTERM."""
    with tempfile.TemporaryDirectory(prefix="sparkmq-secbench-") as folder:
        http_port, kafka_port = _free_port(), _free_port()
        command = [
            sys.executable, "-m", "sparkmq.cli", "serve", "--store-dir", f"{folder}/store",
            "--port", str(http_port), "--kafka-port", str(kafka_port), "--log-level", "warning",
            "--max-batch", "100000", "--operators", "off",
        ]  # fmt: skip
        context, ca_file = None, None
        if secured:
            users, ca_file, cert, key = _write_security(Path(folder))
            command += ["--auth-file", str(users), "--tls-cert", str(cert), "--tls-key", str(key)]
            context = ssl.create_default_context(cafile=str(ca_file))
        process = subprocess.Popen(command, env=os.environ.copy())
        url = f"{'https' if secured else 'http'}://127.0.0.1:{http_port}"
        try:
            _wait_healthy(url, context, process)
            yield Broker(url, f"127.0.0.1:{kafka_port}", context, ca_file)
        finally:
            process.terminate()
            process.wait(timeout=60)


def _wait_healthy(url: str, context: ssl.SSLContext | None, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1, verify=context or True).status_code == 200:
                return
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("broker did not start") from None
            time.sleep(0.1)


def _headers(broker: Broker) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"} if broker.ssl_context is not None else {}


def http_batches(broker: Broker, seconds: float, batch_size: int = 1000) -> Figure:
    content, media = batch_request("json", batch_size)
    headers = {"Content-Type": media, **_headers(broker)}
    sent = 0
    with httpx.Client(base_url=broker.http_url, verify=broker.ssl_context or True, headers=headers) as client:
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            answer = client.post("/topics/bench-batch/messages:batch", content=content)
            if answer.status_code != 201:
                raise RuntimeError(f"batch produce answered {answer.status_code}")
            sent += batch_size
        return Figure("HTTP JSON batch produce", sent, time.perf_counter() - started, "msg")


async def _single_client(broker: Broker, request: bytes, stop_at: float) -> int:
    parsed = httpx.URL(broker.http_url)
    reader, writer = await asyncio.open_connection(parsed.host, parsed.port, ssl=broker.ssl_context)
    done = 0
    try:
        while time.perf_counter() < stop_at:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            if int(head.split(b" ", 2)[1]) != 201:
                raise RuntimeError(f"produce answered {head[:40]!r}")
            length = next(
                int(h.split(b":", 1)[1])
                for h in head.split(b"\r\n")
                if h.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            done += 1
    finally:
        writer.close()
    return done


def http_singles(broker: Broker, seconds: float, clients: int = 8) -> Figure:
    body = json.dumps({"body": BODY.decode()}).encode()
    extra = "".join(f"{name}: {value}\r\n" for name, value in _headers(broker).items())
    request = (
        f"POST /topics/bench-single/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body

    async def run() -> int:
        stop_at = time.perf_counter() + seconds
        return sum(await asyncio.gather(*(_single_client(broker, request, stop_at) for _ in range(clients))))

    started = time.perf_counter()
    count = uvloop.run(run())  # the broker's own loop: the client's TLS takes less of the cores
    return Figure(f"HTTP single produce ({clients} conns)", count, time.perf_counter() - started, "req")


def kafka_produce(broker: Broker, messages: int) -> Figure:
    config: dict[str, object] = {"bootstrap.servers": broker.kafka, "linger.ms": 5, "acks": "all"}
    if broker.ca_file is not None:
        config |= {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SHA512.value,
            "sasl.username": "bench",
            "sasl.password": PASSWORD,
            "ssl.ca.location": str(broker.ca_file),
        }
    producer = Producer(config)
    producer.produce("bench-kafka", BODY)  # connect, log in and create the topic first
    producer.flush(30)
    started = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce("bench-kafka", BODY)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) != 0:
        raise RuntimeError("confluent-kafka did not deliver every message")
    return Figure("confluent-kafka produce", messages, time.perf_counter() - started, "msg")


class FastScramClient:
    """A SCRAM client whose PBKDF2 ran once (same salt every login): measures the server."""

    def __init__(self, salt: bytes, iterations: int) -> None:
        self.key = client_key(SHA512, salted_password(SHA512, PASSWORD, salt, iterations))
        self.stored_key = SHA512.hash(self.key)

    def final(self, first_bare: str, server_first: bytes) -> bytes:
        first = parse_server_first(server_first)
        without_proof, _ = format_client_final("n,,", first.nonce, b"")
        auth = f"{first_bare},{first.text},{without_proof}".encode()
        return format_client_final("n,,", first.nonce, xor(self.key, SHA512.hmac(self.stored_key, auth)))[
            1
        ].encode()


def scram_server_logins(seconds: float) -> Figure:
    credential = make_credential(SHA512, PASSWORD)
    client = FastScramClient(credential.salt, credential.iterations)
    lookup = {("bench", SHA512): credential}.get
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        server = ScramServer(SHA512, lambda user, mech: lookup((user, mech)), b"s" * 32)
        first = format_client_first("bench", f"n{done}")
        server_first = server.handle_client_first(first.encode())
        server.handle_client_final(client.final(first[3:], server_first))
        done += 1
    return Figure("SCRAM-SHA-512 logins (server side)", done, time.perf_counter() - started, "login")


def ratio_line(name: str, secured: Figure, plain: Figure) -> str:
    return f"{name:<44} {secured.rate:>12,.0f} vs {plain.rate:>12,.0f} {secured.unit}/s  = {secured.rate / plain.rate:.2f}x"  # noqa: E501


def _measure_rows(
    secured: Broker, plain: Broker, args: argparse.Namespace, round_index: int
) -> list[tuple[str, Figure, Figure]]:
    """One round of every row; odd rounds measure plaintext first, so the order cancels out."""
    phases: list[tuple[str, Callable[[Broker], Figure]]] = [
        ("HTTP JSON batch produce, TLS + token", lambda b: http_batches(b, args.seconds)),
        ("HTTP single produce, TLS + token", lambda b: http_singles(b, args.seconds)),
        ("confluent-kafka produce, SASL_SSL SCRAM-512", lambda b: kafka_produce(b, args.kafka_messages)),
    ]
    rows = []
    for name, measure in phases:
        if round_index % 2:
            plain_figure = measure(plain)
            secured_figure = measure(secured)
        else:
            secured_figure = measure(secured)
            plain_figure = measure(plain)
        rows.append((name, secured_figure, plain_figure))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="Duration of each HTTP phase.")
    parser.add_argument("--kafka-messages", type=int, default=50_000, help="Messages per Kafka phase.")
    parser.add_argument("--rounds", type=int, default=3, help="Rounds, alternating which side goes first.")
    args = parser.parse_args()
    with serve(secured=False) as plain, serve(secured=True) as secured:
        rounds = [_measure_rows(secured, plain, args, index) for index in range(args.rounds)]
    print(f"load average {os.getloadavg()[0]:.1f}; medians of {args.rounds} rounds")
    print(f"{'figure':<44} {'secured':>12}    {'plaintext':>12}")
    for position, (name, _, _) in enumerate(rounds[0]):
        pairs = sorted((r[position] for r in rounds), key=lambda row: row[1].rate / row[2].rate)
        _, secured_figure, plain_figure = pairs[len(pairs) // 2]  # the round of the median ratio
        print(ratio_line(name, secured_figure, plain_figure))
    print(scram_server_logins(args.seconds).line())


if __name__ == "__main__":
    main()
