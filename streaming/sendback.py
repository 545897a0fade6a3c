"""Sending a streaming job's failed rows into the retry ladder, exactly once per micro-batch.

Use it inside ``foreachBatch`` on the rows your job could not process (they carry the source's
``msg_id``)::

    from streaming.sendback import send_back

    def handle(df, batch_id):
        failed = process(df)              # rows of the sparkmq source you could not handle
        send_back(failed, batch_id, endpoint="http://127.0.0.1:8080", group="billing",
                  topic="orders", query="billing-job")

    stream.writeStream.foreachBatch(handle).option("checkpointLocation", ...).start()

Each row becomes ``POST /groups/{group}/messages:sendBack`` with the ``Idempotency-Key``
``spark:{query}:{batch_id}:{msg_id}``: a replayed micro-batch (after a driver crash) repeats the
same keys and stores nothing new, and the broker's retry resolver accepts one retry per
delivery attempt anyway. Rows are sent from the driver, in order, ``concurrency`` at a time.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

MAX_KEY_CHARS = 200


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
    concurrency: int = 8,
) -> list[dict[str, Any]]:
    """Send every row of ``df`` back for ``group``; returns the broker's answers in row order."""
    ids = [row[0] for row in df.select(msg_id_column).collect()]
    headers = {"Authorization": f"Bearer {auth_token}"} if auth_token else {}
    with httpx.Client(base_url=endpoint.rstrip("/"), headers=headers, timeout=30) as http:

        def one(msg_id: str) -> dict[str, Any]:
            key = f"spark:{query}:{batch_id}:{msg_id}"[:MAX_KEY_CHARS]
            response = http.post(
                f"/groups/{group}/messages:sendBack",
                json={"topic": topic, "msg_id": msg_id, "delay_level": delay_level},
                headers={"Idempotency-Key": key},
            )
            if response.status_code != 200:
                raise SendBackError(f"send-back of {msg_id} refused: {response.status_code} {response.text}")
            answer: dict[str, Any] = response.json()
            return answer

        with ThreadPoolExecutor(max(1, concurrency)) as pool:
            return list(pool.map(one, ids))
