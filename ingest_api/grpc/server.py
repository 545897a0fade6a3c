"""The gRPC door: ``apache.rocketmq.v2.MessagingService`` on ``grpc.aio``, one table row per RPC.

With ``--auth-file`` each RPC is first admitted by :class:`~ingest_api.grpc.authz.CallGuard`
(RocketMQ 5's signature, then the RPC's rights; ``UNAUTHORIZED`` otherwise). Then it checks the
call's metadata (``x-mq-client-id`` missing -> ``CLIENT_ID_REQUIRED``),
converts the request into plain values (:mod:`~ingest_api.grpc.convert`), asks the broker
through :class:`~ingest_api.grpc.port.GrpcBrokerPort` and answers with
:mod:`~ingest_api.grpc.responses`::

    QueryRoute              -> port.query_route        Heartbeat        -> registry + port.heartbeat
    SendMessage             -> port.send               QueryAssignment  -> port.query_assignment
    ReceiveMessage (stream) -> port.receive            AckMessage       -> port.ack
    ChangeInvisibleDuration -> port.change_invisible   EndTransaction   -> port.end_transaction
    ForwardMessageToDeadLetterQueue -> port.forward_to_dlq
    Telemetry (bidi)        -> telemetry.TelemetrySession (settings reply, check-backs)
    NotifyClientTermination -> registry + port.client_gone
    PullMessage, UpdateOffset, GetOffset, QueryOffset, RecallMessage, SyncLiteSubscription
                            -> gRPC UNIMPLEMENTED

Refusals and store faults travel in ``status`` (their ``Code``, see :mod:`~ingest_api.grpc.status`);
an unexpected exception is logged with its stack and answered ``INTERNAL_SERVER_ERROR``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from broker.auth import DoorAuth
from ingest_api.grpc import requests as rq
from ingest_api.grpc.authz import CallGuard
from ingest_api.grpc.clients import ClientRegistry
from ingest_api.grpc.convert import SendLimits, from_send_request, to_proto, under_real_topic
from ingest_api.grpc.port import AckEntry, GrpcBrokerPort, HandleResult, HandleStatus
from ingest_api.grpc.responses import (
    delivery_timestamp,
    query_assignment_response,
    query_route_response,
    receive_stream,
    recover_orphaned_transaction,
    send_response,
)
from ingest_api.grpc.settings import ServerSettings
from ingest_api.grpc.status import Code, GrpcRefusal, ok, status, status_for
from ingest_api.grpc.telemetry import TelemetrySession
from ingest_api.grpc.v2 import definition_pb2 as pb
from ingest_api.grpc.v2 import service_pb2 as spb
from ingest_api.grpc.v2 import service_pb2_grpc
from store import Clock, InvalidArgument, MessageView, SparkMQError, wall_clock_ms

log = logging.getLogger(__name__)
R = TypeVar("R")


@dataclass(frozen=True)
class DoorConfig:
    """The gRPC door's knobs (RocketMQ 5's proxy defaults)."""

    limits: SendLimits = field(default_factory=SendLimits)
    settings: ServerSettings = field(default_factory=ServerSettings)
    receive: rq.ReceiveRules = field(default_factory=rq.ReceiveRules)

    def validate(self) -> DoorConfig:
        """``self``, or :class:`store.InvalidArgument` naming the first contradiction."""
        sizes = {
            "limits.max_body_bytes": self.limits.max_body_bytes,
            "limits.max_user_properties": self.limits.max_user_properties,
            "limits.max_delay_ms": self.limits.max_delay_ms,
            "settings.max_body_bytes": self.settings.max_body_bytes,
            "receive.max_batch_size": self.receive.max_batch_size,
            "receive.max_invisible_ms": self.receive.max_invisible_ms,
            "receive.min_long_polling_ms": self.receive.min_long_polling_ms,
        }
        for name, value in sizes.items():
            if value <= 0:
                raise InvalidArgument(f"{name} must be > 0, got {value}")
        if self.receive.min_long_polling_ms > self.receive.max_long_polling_ms:
            raise InvalidArgument("receive.min_long_polling_ms is above receive.max_long_polling_ms")
        if self.settings.max_body_bytes > self.limits.max_body_bytes:
            raise InvalidArgument("settings.max_body_bytes (told to clients) is above limits.max_body_bytes")
        if self.settings.receive_batch_size > self.receive.max_batch_size:
            raise InvalidArgument("settings.receive_batch_size is above receive.max_batch_size")
        return self


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    """The servicer: each RPC is a row of the module doc's table."""

    def __init__(
        self,
        port: GrpcBrokerPort,
        registry: ClientRegistry,
        config: DoorConfig | None = None,
        clock_ms: Clock = wall_clock_ms,
        auth: DoorAuth | None = None,
    ) -> None:
        """``auth``: the broker's users (``--auth-file``); ``None`` lets every call in."""
        self._port = port
        self.registry = registry
        self._config = (config or DoorConfig()).validate()
        self._clock_ms = clock_ms
        self._guard = CallGuard(auth)

    # --- connecting --------------------------------------------------------------------------

    async def QueryRoute(self, request: spb.QueryRouteRequest, context: Any) -> spb.QueryRouteResponse:  # noqa: N802
        async def answer(_: str) -> spb.QueryRouteResponse:
            rq.check_topic(request.topic.name)
            create = self._guard.may_create(context, request.topic.name)
            return query_route_response(
                request.topic, await self._port.query_route(request.topic.name, create)
            )

        return await self._answer(context, request, spb.QueryRouteResponse, answer)

    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Any) -> spb.HeartbeatResponse:  # noqa: N802
        async def answer(client_id: str) -> spb.HeartbeatResponse:
            session = self.registry.heartbeat(client_id)
            if session is None:
                return spb.HeartbeatResponse(status=status(Code.UNRECOGNIZED_CLIENT_TYPE, "no settings yet"))
            await self._port.heartbeat(session)
            return spb.HeartbeatResponse(status=ok())

        return await self._answer(context, request, spb.HeartbeatResponse, answer)

    async def Telemetry(  # noqa: N802
        self, requests: AsyncIterator[spb.TelemetryCommand], context: Any
    ) -> AsyncIterator[spb.TelemetryCommand]:
        client_id = rq.client_id_of(context)
        if not client_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "x-mq-client-id is required")
        session = TelemetrySession(
            client_id,
            self.registry,
            self._port.group_policy,
            self._config.settings,
            admit=lambda command: self._guard.admit(context, command),
        )
        try:
            async for command in session.run(requests):
                yield command
        except GrpcRefusal as refusal:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refusal.message)

    async def NotifyClientTermination(  # noqa: N802
        self, request: spb.NotifyClientTerminationRequest, context: Any
    ) -> spb.NotifyClientTerminationResponse:
        async def answer(client_id: str) -> spb.NotifyClientTerminationResponse:
            session = self.registry.remove(client_id)
            if session is None:
                message = "cannot find client settings for this client"
                return spb.NotifyClientTerminationResponse(
                    status=status(Code.UNRECOGNIZED_CLIENT_TYPE, message)
                )
            await self._port.client_gone(session)
            return spb.NotifyClientTerminationResponse(status=ok())

        return await self._answer(context, request, spb.NotifyClientTerminationResponse, answer)

    def push_check_back(self, topic: str, message: MessageView, transaction_id: str) -> bool:
        """Ask a producer of ``topic`` whether transaction ``transaction_id`` (its half message
        ``message``, shown under its real topic) commits; the producer answers with an
        EndTransaction from SOURCE_SERVER_CHECK. ``False`` when no producer of the topic has a
        live Telemetry stream. Thread-safe."""
        shown = to_proto(under_real_topic(message), now_ms=self._clock_ms())
        command = recover_orphaned_transaction(shown, transaction_id)
        return any(s.stream is not None and s.stream.push(command) for s in self.registry.producers_of(topic))

    async def expire_clients(self) -> list[str]:
        """Drop the clients unseen for the registry's expiry and tell the port; their ids."""
        gone = self.registry.expire()
        for session in gone:
            await self._port.client_gone(session)
        return [s.client_id for s in gone]

    # --- sending -----------------------------------------------------------------------------

    async def SendMessage(self, request: spb.SendMessageRequest, context: Any) -> spb.SendMessageResponse:  # noqa: N802
        async def answer(client_id: str) -> spb.SendMessageResponse:
            peer = rq.peer_of(context)
            messages = from_send_request(
                request, peer=peer, now_ms=self._clock_ms(), limits=self._config.limits
            )
            return send_response(await self._port.send(messages, client_id))

        return await self._answer(context, request, spb.SendMessageResponse, answer)

    async def EndTransaction(  # noqa: N802
        self, request: spb.EndTransactionRequest, context: Any
    ) -> spb.EndTransactionResponse:
        async def answer(_: str) -> spb.EndTransactionResponse:
            end = rq.transaction_end(request)
            await self._port.end_transaction(
                end.topic, end.message_id, end.transaction_id, end.commit, end.from_check
            )
            return spb.EndTransactionResponse(status=ok())

        return await self._answer(context, request, spb.EndTransactionResponse, answer)

    # --- consuming ---------------------------------------------------------------------------

    async def ReceiveMessage(  # noqa: N802
        self, request: spb.ReceiveMessageRequest, context: Any
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        refused = self._guard.admit(context, request)
        if refused is not None:  # the proxy writes the status alone and ends the stream
            yield spb.ReceiveMessageResponse(status=refused)
            return
        client_id = rq.client_id_of(context)
        try:
            if not client_id:
                raise GrpcRefusal(Code.CLIENT_ID_REQUIRED, "x-mq-client-id is required")
            receive = rq.receive_request(request, client_id, context.time_remaining(), self._config.receive)
            result = await self._port.receive(receive)
        except SparkMQError as exc:
            yield spb.ReceiveMessageResponse(status=status_for(exc))
            yield delivery_timestamp(self._clock_ms())
            return
        for response in receive_stream(result, self._clock_ms()):
            yield response

    async def AckMessage(self, request: spb.AckMessageRequest, context: Any) -> spb.AckMessageResponse:  # noqa: N802
        async def answer(_: str) -> spb.AckMessageResponse:
            rq.check_group_and_topic(request.group.name, request.topic.name)
            entries = [AckEntry(e.message_id, e.receipt_handle) for e in request.entries]
            results = await self._port.ack(request.group.name, request.topic.name, entries)
            out = [
                spb.AckMessageResultEntry(
                    message_id=e.message_id, receipt_handle=e.receipt_handle, status=handle_status(r)
                )
                for e, r in zip(entries, results, strict=True)
            ]
            return spb.AckMessageResponse(status=overall(out), entries=out)

        return await self._answer(context, request, spb.AckMessageResponse, answer)

    async def ChangeInvisibleDuration(  # noqa: N802
        self, request: spb.ChangeInvisibleDurationRequest, context: Any
    ) -> spb.ChangeInvisibleDurationResponse:
        async def answer(_: str) -> spb.ChangeInvisibleDurationResponse:
            rq.check_group_and_topic(request.group.name, request.topic.name)
            invisible_ms = rq.invisible_ms(request.invisible_duration, self._config.receive)
            result = await self._port.change_invisible(
                request.group.name,
                request.topic.name,
                request.receipt_handle,
                request.message_id,
                invisible_ms,
            )
            return spb.ChangeInvisibleDurationResponse(
                status=handle_status(result), receipt_handle=result.receipt_handle
            )

        return await self._answer(context, request, spb.ChangeInvisibleDurationResponse, answer)

    async def ForwardMessageToDeadLetterQueue(  # noqa: N802
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        async def answer(_: str) -> spb.ForwardMessageToDeadLetterQueueResponse:
            rq.check_group_and_topic(request.group.name, request.topic.name)
            result = await self._port.forward_to_dlq(
                request.group.name,
                request.topic.name,
                request.receipt_handle,
                request.message_id,
                request.delivery_attempt,
            )
            return spb.ForwardMessageToDeadLetterQueueResponse(status=handle_status(result))

        return await self._answer(context, request, spb.ForwardMessageToDeadLetterQueueResponse, answer)

    async def QueryAssignment(  # noqa: N802
        self, request: spb.QueryAssignmentRequest, context: Any
    ) -> spb.QueryAssignmentResponse:
        async def answer(client_id: str) -> spb.QueryAssignmentResponse:
            rq.check_group_and_topic(request.group.name, request.topic.name)
            create = self._guard.may_create(context, request.topic.name)
            routes = await self._port.query_assignment(
                request.topic.name, request.group.name, client_id, create
            )
            return query_assignment_response(request.topic, routes)

        return await self._answer(context, request, spb.QueryAssignmentResponse, answer)

    # --- not served: offsets (no official client calls them), recall, lite topics ------------

    async def PullMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        await _unimplemented(context, "PullMessage")
        yield  # pragma: no cover - an async generator, as the streaming RPC requires

    async def UpdateOffset(self, request: Any, context: Any) -> Any:  # noqa: N802
        await _unimplemented(context, "UpdateOffset")

    async def GetOffset(self, request: Any, context: Any) -> Any:  # noqa: N802
        await _unimplemented(context, "GetOffset")

    async def QueryOffset(self, request: Any, context: Any) -> Any:  # noqa: N802
        await _unimplemented(context, "QueryOffset")

    async def RecallMessage(self, request: Any, context: Any) -> Any:  # noqa: N802
        await _unimplemented(context, "RecallMessage")

    async def SyncLiteSubscription(self, request: Any, context: Any) -> Any:  # noqa: N802
        await _unimplemented(context, "SyncLiteSubscription")

    # --- the shared frame of a unary RPC -----------------------------------------------------

    async def _answer(
        self, context: Any, request: Any, response: Callable[..., R], call: Callable[[str], Awaitable[R]]
    ) -> R:
        """Run ``call(client_id)`` once the guard admits ``request``; a refused call, a missing
        client id, a refusal or a fault becomes ``status``."""
        refused = self._guard.admit(context, request)
        if refused is not None:
            return response(status=refused)
        client_id = rq.client_id_of(context)
        if not client_id:
            return response(status=status(Code.CLIENT_ID_REQUIRED, "x-mq-client-id is required"))
        try:
            return await call(client_id)
        except SparkMQError as exc:
            return response(status=status_for(exc))
        except Exception as exc:
            log.exception("gRPC %s failed for client %s", getattr(response, "__name__", "call"), client_id)
            return response(status=status(Code.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}"))


def overall(entries: list[spb.AckMessageResultEntry]) -> pb.Status:
    """The top-level status of per-entry results: theirs when they agree, else MULTIPLE_RESULTS."""
    codes = {entry.status.code for entry in entries}
    if not codes:
        return ok()
    return entries[0].status if len(codes) == 1 else status(Code.MULTIPLE_RESULTS)


def handle_status(result: HandleResult) -> pb.Status:
    if result.status is HandleStatus.OK:
        return ok()
    return status(Code.INVALID_RECEIPT_HANDLE, result.detail or "invalid receipt handle")


async def _unimplemented(context: Any, rpc: str) -> None:
    await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{rpc} is not served by sparkmq")


class GrpcDoor:
    """A started ``grpc.aio`` server with the servicer (inside a running event loop), and the
    task that drops clients unseen for the registry's expiry (every ``expiry_check_s``)."""

    def __init__(self, service: MessagingService, server: Any, port: int, expiry_check_s: float) -> None:
        self.service = service
        self.port = port
        self._server = server
        self._expiry = asyncio.create_task(self._expire_every(expiry_check_s), name="grpc-client-expiry")

    @classmethod
    async def start(
        cls,
        service: MessagingService,
        host: str = "127.0.0.1",
        port: int = 8081,
        expiry_check_s: float = 5.0,
        credentials: grpc.ServerCredentials | None = None,
    ) -> GrpcDoor:
        """Bind ``host:port`` (0: a free port, see :attr:`port`) and start serving; TLS only
        when ``credentials`` are given (``grpc.ssl_server_credentials``), plaintext otherwise.

        Raises :class:`OSError` when the address cannot be bound.
        """
        server = grpc.aio.server()
        # generated, untyped (mypy does not check ingest_api.grpc.v2)
        service_pb2_grpc.add_MessagingServiceServicer_to_server(service, server)  # type: ignore[no-untyped-call]
        address = f"{host}:{port}"
        if credentials is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, credentials)
        if bound == 0:
            raise OSError(f"cannot bind the gRPC door to {host}:{port}")
        await server.start()
        return cls(service, server, bound, expiry_check_s)

    async def _expire_every(self, period_s: float) -> None:
        while True:
            await asyncio.sleep(period_s)
            await self.service.expire_clients()

    async def stop(self, grace_s: float = 1.0) -> None:
        """Stop accepting calls; running ones get ``grace_s`` seconds, then are cancelled."""
        self._expiry.cancel()
        await self._server.stop(grace_s)
