"""Transactional messages: end a transaction, list them, and register producer check-backs.

* ``POST /transactions/{transaction_id}`` ``{"action": "commit"|"rollback", "producer_group"}``
  ends the transaction once (final messages and op in one atomic append); a second end answers
  200 with the first outcome; an unknown id is 404.
* ``GET /transactions?producer_group=&state=prepared`` lists transactions with age and checks.
* ``PUT / GET / DELETE /producer-groups/{group}`` ``{"check_url"}``: where check-backs go.

Half messages are produced with ``"transaction": {"producer_group": ...}`` on
``POST /topics/{topic}/messages`` and ``messages:batch`` (docs/transactions.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response

from broker.auth import Principal, Right, authorize, may, may_produce_somewhere
from broker.errors import BrokerError
from broker.membership import PRODUCER_GROUPS
from broker.peers import ask_others, is_local_request, passed_headers
from broker.state import Broker
from broker.threads import run_blocking
from broker.transactions import TransactionBoard
from ingest_api.http.deps import BrokerDep, PrincipalDep
from ingest_api.http.schemas import (
    EndTransactionIn,
    EndTransactionOut,
    ErrorOut,
    ProduceOut,
    ProducerGroupIn,
    ProducerGroupOut,
    TransactionListOut,
    TransactionOut,
)
from ingest_api.params import GROUP
from store import TxOutcome
from store.publish import KAFKA_PRODUCER_GROUP_PREFIX, EndRequest, Transaction, UnknownTransaction

router = APIRouter(tags=["transactions"], responses={404: {"model": ErrorOut}, 400: {"model": ErrorOut}})

GroupPath = Annotated[str, Path(**GROUP, description="Producer group.")]
TransactionPath = Annotated[
    str, Path(min_length=1, max_length=128, description="transaction_id of the produce.")
]

_STATE = {
    None: "prepared",
    TxOutcome.COMMIT: "committed",
    TxOutcome.ROLLBACK: "rolled_back",
    TxOutcome.DISCARD: "discarded",
}


def board_of(broker: Broker) -> TransactionBoard:
    board = broker.operators.transactions if broker.operators is not None else None
    if board is None:
        raise BrokerError(503, "transactions_unavailable", "this broker has no transaction service")
    return board


def _authorize_topics(principal: Principal | None, tx: Transaction) -> None:
    for topic in tx.topics:
        authorize(principal, Right.PRODUCE, topic)


def _out(tx: Transaction, now_ms: int) -> TransactionOut:
    """``now_ms`` is the store's clock, the one ``born_ms`` was read from."""
    return TransactionOut(
        transaction_id=tx.transaction_id,
        producer_group=tx.producer_group,
        state=_STATE[tx.outcome],  # type: ignore[arg-type]
        topics=tx.topics,
        messages=len(tx.halves),
        born_timestamp=tx.born_ms,
        age_ms=max(0, now_ms - tx.born_ms),
        check_times=tx.check_times,
        last_check_timestamp=tx.last_check_ms,
    )


async def _elsewhere(
    broker: Broker, transaction_id: str, headers: Mapping[str, str]
) -> tuple[str, dict[str, Any]]:
    """In a cluster: the broker that holds an unknown-here transaction (it lives where its
    halves were stored); 404 when no broker knows it."""
    if is_local_request(broker, headers):
        raise UnknownTransaction(f"no transaction {transaction_id!r}")
    found = await ask_others(broker, f"/transactions/{transaction_id}", headers)
    if not found:
        raise UnknownTransaction(f"no transaction {transaction_id!r} on any broker")
    return next(iter(found.items()))


@router.post(
    "/transactions/{transaction_id}",
    response_model=EndTransactionOut,
    responses={409: {"model": ErrorOut, "description": "producer_group_mismatch, kafka_transaction."}},
)
async def end_transaction(
    transaction_id: TransactionPath,
    body: EndTransactionIn,
    request: Request,
    broker: BrokerDep,
    principal: PrincipalDep,
) -> Response:
    """Commit or roll back a transaction. Idempotent: a second end (a retry, or an end racing a
    check-back answer) changes nothing and reports the first outcome. In a cluster any broker
    may be asked: the end goes to the broker that holds the transaction."""
    status, answer = await end_transaction_json(broker, principal, transaction_id, body, request.headers)
    return Response(answer, status_code=status, media_type="application/json")


async def end_transaction_json(
    broker: Broker,
    principal: Principal | None,
    transaction_id: str,
    body: EndTransactionIn,
    headers: Mapping[str, str],
) -> tuple[int, bytes]:
    """End one transaction: ``(status, JSON body)``. The route above and the fast lane
    (:mod:`ingest_api.http.fastlane`) both end here; refusals are raised for the one error
    mapping. In a cluster a transaction held by another broker is ended there."""
    board = board_of(broker)
    tx = board.service.get(transaction_id)
    if tx is None:
        holder, _ = await _elsewhere(broker, transaction_id, headers)
        assert broker.cluster is not None
        forwarded = await broker.peers.request(
            broker.cluster.view.master_of(holder),
            holder,
            "POST",
            f"/transactions/{transaction_id}",
            headers={**passed_headers(headers), "content-type": "application/json"},
            content=body.model_dump_json().encode(),
        )
        return forwarded.status_code, forwarded.content
    _authorize_topics(principal, tx)
    if tx.producer_group.startswith(KAFKA_PRODUCER_GROUP_PREFIX):
        raise BrokerError(
            409,
            "kafka_transaction",
            f"transaction {transaction_id!r} belongs to a Kafka producer: it ends by its EndTxn "
            "or by the Kafka coordinator's transaction timeout",
        )
    outcome = TxOutcome.COMMIT if body.action == "commit" else TxOutcome.ROLLBACK
    ended = await board.ends.end(EndRequest(transaction_id, outcome, body.producer_group))
    out = _out(ended.transaction, broker.store.now_ms())
    answer = EndTransactionOut(
        **out.model_dump(),
        ended_now=ended.ended_now,
        results=[ProduceOut.of(r) for r in ended.transaction.results],
    )
    return 200, answer.model_dump_json().encode()


@router.get("/transactions", response_model=TransactionListOut)
async def list_transactions(
    broker: BrokerDep,
    principal: PrincipalDep,
    producer_group: Annotated[str | None, Query(description="Only this producer group.")] = None,
    state: Annotated[
        Literal["prepared", "committed", "rolled_back", "discarded", "all"], Query()
    ] = "prepared",
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> TransactionListOut:
    """Transactions, oldest first (pending ones by default), with their age and check count."""
    board = board_of(broker)
    found = board.service.transactions(producer_group)
    rows = [tx for tx in found if state == "all" or _STATE[tx.outcome] == state]
    rows.sort(key=lambda tx: (tx.born_ms, tx.transaction_id))
    visible = []
    now = broker.store.now_ms()
    for tx in rows:
        if principal is None or all(may(principal, Right.PRODUCE, t) for t in tx.topics):
            visible.append(_out(tx, now))
        if len(visible) >= limit:
            break
    return TransactionListOut(transactions=visible)


@router.get("/transactions/{transaction_id}", response_model=TransactionOut)
async def get_transaction(
    transaction_id: TransactionPath, request: Request, broker: BrokerDep, principal: PrincipalDep
) -> TransactionOut:
    """One transaction: state, topics, age and check-backs (in a cluster: from any broker)."""
    tx = board_of(broker).service.get(transaction_id)
    if tx is None:
        _, found = await _elsewhere(broker, transaction_id, request.headers)
        return TransactionOut.model_validate(found)
    _authorize_topics(principal, tx)
    return _out(tx, broker.store.now_ms())


def _may_register(principal: Principal | None) -> None:
    if principal is not None and not may_produce_somewhere(principal):
        raise BrokerError(403, "forbidden", f"{principal.name!r} may not produce")


def _group_out(group: str, doc: dict[str, object]) -> ProducerGroupOut:
    return ProducerGroupOut(
        producer_group=group,
        check_url=str(doc["check_url"]),
        registered_timestamp=int(doc.get("registered_ms", 0)),  # type: ignore[call-overload]
    )


@router.put(
    "/producer-groups/{group}",
    response_model=ProducerGroupOut,
    responses={201: {"model": ProducerGroupOut, "description": "Registered now (200: changed)."}},
)
async def put_producer_group(
    group: GroupPath, body: ProducerGroupIn, response: Response, broker: BrokerDep, principal: PrincipalDep
) -> ProducerGroupOut:
    """Register where the broker sends check-backs for this producer group (201 when new)."""
    _may_register(principal)
    groups = board_of(broker).groups
    if broker.cluster is not None:  # every broker may hold this group's halves: a cluster setting
        await run_blocking(broker.cluster.put_setting, PRODUCER_GROUPS, group, {"check_url": body.check_url})
    created = await run_blocking(groups.put, group, body.check_url)
    response.status_code = 201 if created else 200
    return _group_out(group, groups.get(group) or {})


@router.get("/producer-groups", response_model=list[ProducerGroupOut])
async def list_producer_groups(broker: BrokerDep, principal: PrincipalDep) -> list[ProducerGroupOut]:
    _may_register(principal)
    return [_group_out(g, doc) for g, doc in sorted(board_of(broker).groups.all().items())]


@router.get("/producer-groups/{group}", response_model=ProducerGroupOut)
async def get_producer_group(
    group: GroupPath, broker: BrokerDep, principal: PrincipalDep
) -> ProducerGroupOut:
    _may_register(principal)
    doc = board_of(broker).groups.get(group)
    if doc is None:
        raise BrokerError(404, "unknown_producer_group", f"producer group {group!r} has no check_url")
    return _group_out(group, doc)


@router.delete("/producer-groups/{group}", status_code=204, response_class=Response)
async def delete_producer_group(group: GroupPath, broker: BrokerDep, principal: PrincipalDep) -> None:
    _may_register(principal)
    if broker.cluster is not None:
        await run_blocking(broker.cluster.delete_setting, PRODUCER_GROUPS, group)
    if not await run_blocking(board_of(broker).groups.delete, group):
        raise BrokerError(404, "unknown_producer_group", f"producer group {group!r} has no check_url")
