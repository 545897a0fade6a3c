"""Transactions over remoting: END_TRANSACTION (37, one-way) ends a half through the core
(:func:`broker.halves.end_transaction`), and :class:`CheckBacks` sends the transaction
resolver's check-backs to a live producer of the group as CHECK_TRANSACTION_STATE (39, one-way,
server to client), over the connection that producer's heartbeats came on.

A transaction is named by its half's UNIQ_KEY (the send answer's ``transactionId``; ali-ons and
the Java client send it as ``msgId`` and ``transactionId``). ``commitOrRollback`` 8 commits, 12
rolls back, 0 (unknown) leaves the half to the resolver's next check. The check's body is the
half's CommitLog record, which the client decodes for the transaction id. The producer answers
a check with END_TRANSACTION (``fromTransactionCheck=true``). A group that registered an HTTP
check URL keeps it (:class:`broker.transactions.CheckDispatcher` asks its pushers, this door
and the gRPC door, only for groups without one).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from broker.auth import Right, may
from broker.errors import BrokerError
from broker.halves import end_transaction
from ingest_api.remoting.codec import RemotingCommand, response_to
from ingest_api.remoting.codes import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    RequestCode,
    ResponseCode,
)
from ingest_api.remoting.connection import Connection
from ingest_api.remoting.errors import ConnectionClosed
from ingest_api.remoting.handlers.context import DoorContext
from ingest_api.remoting.handlers.store_errors import answer_store_error
from ingest_api.remoting.headers import CheckTransactionStateRequest, EndTransactionRequest, decode_msg_id
from store import SparkMQError, TxOutcome

log = logging.getLogger("sparkmq.remoting.transactions")

_OUTCOMES = {TRANSACTION_COMMIT_TYPE: TxOutcome.COMMIT, TRANSACTION_ROLLBACK_TYPE: TxOutcome.ROLLBACK}


async def end_transaction_request(
    ctx: DoorContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    """Commit or roll back the transaction the header names (unknown: nothing to do)."""
    header = EndTransactionRequest.from_ext_fields(cmd.ext_fields)
    outcome = _OUTCOMES.get(header.commit_or_rollback)
    if outcome is None:
        return response_to(cmd, ResponseCode.SUCCESS)  # UNKNOW: the resolver checks again later
    txid = header.transaction_id or header.msg_id
    try:
        await end_transaction(ctx.broker, txid, outcome, header.producer_group)
    except (SparkMQError, BrokerError) as exc:
        log.warning("END_TRANSACTION %s of %s: %s", outcome.name, txid, exc)
        return answer_store_error(cmd, exc)
    return response_to(cmd, ResponseCode.SUCCESS)


class CheckBacks:
    """One of ``CheckDispatcher.pushers``: a check goes to a live producer's connection of the group."""

    def __init__(self, ctx: DoorContext) -> None:
        self.ctx = ctx
        self._tasks: set[asyncio.Task[None]] = set()

    def producer_connection(self, group: str, topic: str) -> Connection | None:
        """An open connection of a live producer of ``group`` (by its heartbeats), if any; with
        auth on, one whose signer may write ``topic``: a check-back carries the half message,
        and a heartbeat may name any producer group."""
        ctx = self.ctx
        for client_id in ctx.clients.producer_ids(group, ctx.clock_ms()):
            conn = ctx.connections.get(client_id)
            if conn is not None and not conn.closed and self._may_check(conn, topic):
                return conn
        return None

    def _may_check(self, conn: Connection, topic: str) -> bool:
        if self.ctx.broker.auth is None:
            return True
        return conn.principal is not None and may(conn.principal, Right.PRODUCE, topic)

    def __call__(self, check: dict[str, Any]) -> bool:
        """Start sending ``check`` (on the event loop); False when the group has no live producer."""
        conn = self.producer_connection(str(check["producer_group"]), str(check["topic"]))
        if conn is None:
            return False
        task = asyncio.get_running_loop().create_task(self._send(conn, check))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _send(self, conn: Connection, check: dict[str, Any]) -> None:
        _, offset = decode_msg_id(str(check["msg_id"]))
        record = await self.ctx.run_blocking(self.ctx.store.read_record, offset)
        if record is None:
            log.warning("check of %s: the half at %d is no longer stored", check["transaction_id"], offset)
            return
        header = CheckTransactionStateRequest(
            tran_state_table_offset=0,
            commit_log_offset=offset,
            topic=str(check["topic"]),
            msg_id=str(check["uniq_key"]),
            transaction_id=str(check["transaction_id"]),
            offset_msg_id=str(check["msg_id"]),
        )
        try:
            await conn.invoke_oneway(RequestCode.CHECK_TRANSACTION_STATE, header.to_ext_fields(), record)
        except ConnectionClosed:
            log.info("check of %s: the producer's connection closed", check["transaction_id"])

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
