"""Sending a streaming job's failed rows into the retry ladder, exactly once per micro-batch.

Use it inside ``foreachBatch`` on the rows your job could not process (they carry the source's
``msg_id``)::

    from streaming.sendback import send_back

    def handle(df, batch_id):
        failed = process(df)              # rows of the sparkmq source you could not handle
        send_back(failed, batch_id, endpoint="http://127.0.0.1:8080", group="billing",
                  topic="orders", query="billing-job")

    stream.writeStream.foreachBatch(handle).option("checkpointLocation", ...).start()

The failed rows go in requests of up to ``chunk_rows`` (``POST /groups/{group}/messages:sendBack``
with a list: one atomic append per request), their ids sorted so that a replayed micro-batch
(after a driver crash) makes the same requests, each with the ``Idempotency-Key``
``spark:{query}:{batch_id}:{k}``: the replay stores nothing new, and the broker's retry resolver
accepts one retry per delivery attempt anyway.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from streaming.http_access import auth_headers

MAX_KEY_CHARS = 200
#: Messages per request (the broker takes up to 10,000).
DEFAULT_CHUNK_ROWS = 1000


class SendBackError(RuntimeError):
    """The broker refused a send-back (the batch fails, and Spark retries it)."""


def send_back(
    df: Any,
    batch_id: int,
    *,
    endpoint: str,
    group: str,
    topic: str,
    query: str,
    msg_id_column: str = "msg_id",
    delay_level: int = 0,
    auth_token: str | None = None,
    concurrency: int = 2,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> list[dict[str, Any]]:
    """Send every row of ``df`` back for ``group``; returns the broker's answers in row order."""
    ids = [row[0] for row in df.select(msg_id_column).collect()]
    ordered = sorted(set(ids))
    chunks = [ordered[lo : lo + max(1, chunk_rows)] for lo in range(0, len(ordered), max(1, chunk_rows))]
    headers = auth_headers(auth_token)  # a bearer token, or Basic mapped from Kafka SASL options
    with httpx.Client(base_url=endpoint.rstrip("/"), headers=headers, timeout=60) as http:

        def one(k: int) -> list[dict[str, Any]]:
            key = f"spark:{query}:{batch_id}:{k}"[:MAX_KEY_CHARS]
            response = http.post(
                f"/groups/{group}/messages:sendBack",
                json=[{"topic": topic, "msg_id": m, "delay_level": delay_level} for m in chunks[k]],
                headers={"Idempotency-Key": key},
            )
            if response.status_code != 200:
                raise SendBackError(
                    f"send-back of {len(chunks[k])} rows refused: {response.status_code} {response.text}"
                )
            answers: list[dict[str, Any]] = response.json()
            return answers

        with ThreadPoolExecutor(max(1, concurrency)) as pool:
            answered = [a for chunk in pool.map(one, range(len(chunks))) for a in chunk]
    by_id = dict(zip(ordered, answered, strict=True))
    return [by_id[m] for m in ids]
