"""Transactional halves and ends for doors whose producers name a transaction by its half's
UNIQ_KEY (RocketMQ's remoting clients: one half per transaction, ended by END_TRANSACTION).

:func:`produce_half` stores one half through the coalesced single put (like a plain produce)
and registers it with the transaction board as a transaction of its own; the resolver then
times its check-backs like any other (:mod:`broker.transactions`). :func:`end_transaction`
ends it through the board's grouped, idempotent end (the same as ``POST /transactions/{id}``).
"""

from __future__ import annotations

import dataclasses
import time

from broker.errors import BrokerError
from broker.state import Broker
from broker.transactions import TransactionBoard
from store import PROPERTY_PGROUP, PROPERTY_TRANSACTION_ID, Message, PutResult, TxOutcome
from store.publish import EndRequest, EndResult


def transaction_board(broker: Broker) -> TransactionBoard:
    """The broker's transaction board; 503 when it runs without one."""
    board = broker.operators.transactions if broker.operators is not None else None
    if board is None:
        raise BrokerError(503, "transactions_unavailable", "this broker has no transaction service")
    return board


async def produce_half(broker: Broker, message: Message, producer_group: str) -> PutResult:
    """Store ``message`` (placed by :func:`broker.produce.place_message`) as the one half of a
    transaction named by its UNIQ_KEY (the message's, else a new one) and register it."""
    board = transaction_board(broker)
    if message.delay_level or any(p.startswith("TIMER_") for p in message.properties):
        raise BrokerError(400, "invalid_transaction", "a transactional message cannot be delayed")
    started = time.perf_counter()
    txid = message.uniq_key or broker.store.new_uniq_key()
    system = {PROPERTY_PGROUP: producer_group, PROPERTY_TRANSACTION_ID: txid}
    half = dataclasses.replace(
        message, properties={**message.properties, **system}, transaction_prepared=True, uniq_key=txid
    )
    result = await broker.producer.put(half)
    board.service.register(txid, producer_group, [result], result.store_timestamp_ms, [message.topic])
    broker.metrics.produced(message.topic, 1, len(half.body), "single", time.perf_counter() - started)
    return result


async def end_transaction(
    broker: Broker, transaction_id: str, outcome: TxOutcome, producer_group: str | None
) -> EndResult:
    """Commit or roll back ``transaction_id`` once (grouped with concurrent ends); raises
    ``store.publish.UnknownTransaction`` for a transaction the board does not know."""
    return await transaction_board(broker).ends.end(EndRequest(transaction_id, outcome, producer_group))
