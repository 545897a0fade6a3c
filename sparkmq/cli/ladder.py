"""``sparkmq groups sendback``, ``sparkmq dlq list|resend`` and ``sparkmq tx list|commit|rollback``:
the retry ladder, dead letters and transactions from a script."""

from __future__ import annotations

from typing import Annotated

import typer

from sparkmq.cli.common import (
    DEFAULT_ENDPOINT,
    EndpointOption,
    Output,
    OutputOption,
    TokenOption,
    connect,
    emit,
)
from sparkmq.cli.root import dlq_app, groups_app, tx_app


@groups_app.command("sendback")
def groups_sendback(
    group: str,
    topic: str,
    msg_id: Annotated[str, typer.Argument(help="offsetMsgId or UNIQ_KEY of the message to retry.")],
    delay_level: Annotated[int, typer.Option(help="0 = the ladder (3 + reconsume times), -1 = the DLQ.")] = 0,
    max_reconsume_times: Annotated[int | None, typer.Option(help="Attempts before the DLQ.")] = None,
    idempotency_key: Annotated[
        str | None, typer.Option(help="Makes a retry return the first result.")
    ] = None,
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Send a message the group failed to consume back into the retry ladder (or the DLQ)."""
    body: dict[str, object] = {"topic": topic, "msg_id": msg_id, "delay_level": delay_level}
    if max_reconsume_times is not None:
        body["max_reconsume_times"] = max_reconsume_times
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    with connect(endpoint, token) as sparkmq:
        result = sparkmq.request("POST", f"/groups/{group}/messages:sendBack", json=body, headers=headers)
    emit(output, result, columns=("outcome", "attempt", "delay_level", "target_topic", "request_id"))


@dlq_app.command("list")
def dlq_list(
    group: str,
    offset: Annotated[int, typer.Option(help="First DLQ offset.")] = 0,
    limit: Annotated[int, typer.Option(help="Most dead letters shown.")] = 100,
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """The group's dead letters (%DLQ%group), oldest first."""
    with connect(endpoint, token) as sparkmq:
        page = sparkmq.request(
            "GET", f"/groups/{group}/dlq", params={"offset": offset, "max_messages": limit}
        )
    rows = [
        {
            "offset": m["queue_offset"],
            "msg_id": m["msg_id"],
            "topic": m["properties"].get("RETRY_TOPIC", ""),
            "reconsume_times": m["reconsume_times"],
            "body": (m["body"] or "")[:60],
        }
        for m in page["messages"]
    ]
    emit(output, page, rows=rows, columns=("offset", "msg_id", "topic", "reconsume_times", "body"))


@dlq_app.command("resend")
def dlq_resend(
    group: str,
    msg_id: str,
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Produce a dead letter again to its original topic (same UNIQ_KEY)."""
    with connect(endpoint, token) as sparkmq:
        result = sparkmq.request("POST", f"/groups/{group}/dlq/{msg_id}:resend")
    emit(output, result, columns=("topic", "queue_id", "queue_offset", "msg_id"))


@tx_app.command("list")
def tx_list(
    producer_group: Annotated[str | None, typer.Option(help="Only this producer group.")] = None,
    state: Annotated[
        str, typer.Option(help="prepared, committed, rolled_back, discarded or all.")
    ] = "prepared",
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Transactions with their age and check-backs (open ones by default)."""
    params = {"state": state, **({"producer_group": producer_group} if producer_group else {})}
    with connect(endpoint, token) as sparkmq:
        listed = sparkmq.request("GET", "/transactions", params=params)
    rows = [dict(t, topics=",".join(t["topics"])) for t in listed["transactions"]]
    emit(
        output,
        listed,
        rows=rows,
        columns=("transaction_id", "producer_group", "state", "topics", "age_ms", "check_times"),
    )


def _end(
    transaction_id: str, producer_group: str, action: str, endpoint: str, token: str | None, output: Output
) -> None:
    with connect(endpoint, token) as sparkmq:
        result = sparkmq.request(
            "POST",
            f"/transactions/{transaction_id}",
            json={"action": action, "producer_group": producer_group},
        )
    emit(output, result, columns=("transaction_id", "state", "ended_now"))


@tx_app.command("commit")
def tx_commit(
    transaction_id: str,
    producer_group: Annotated[str, typer.Option(help="The transaction's producer group.")],
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Commit a transaction (idempotent: a second end reports the first outcome)."""
    _end(transaction_id, producer_group, "commit", endpoint, token, output)


@tx_app.command("rollback")
def tx_rollback(
    transaction_id: str,
    producer_group: Annotated[str, typer.Option(help="The transaction's producer group.")],
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Roll a transaction back."""
    _end(transaction_id, producer_group, "rollback", endpoint, token, output)
