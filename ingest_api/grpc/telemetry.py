"""One client's Telemetry stream: the settings exchange and the commands the server pushes.

The client writes ``TelemetryCommand{settings}`` (at start and every 300 s); each is answered
on the stream at once with ``{status OK, settings}`` (:mod:`ingest_api.grpc.settings`) and
registers the client with the stream as its push handle. The server pushes
``recover_orphaned_transaction_command`` (check-backs) through :meth:`TelemetrySession.push`,
from any thread. Other client commands (thread stack traces, verify results) are answered by
nothing, as the proxy only relays them to admin requests sparkmq does not make.

Settings with neither publishing nor subscription end the stream with gRPC
``INVALID_ARGUMENT``, as the proxy does. Each command is first put to ``admit`` (the door's
:class:`~ingest_api.grpc.authz.CallGuard`, re-checked per command as the proxy's pipeline
does); a refused one is answered with its ``{status}`` alone, and the stream ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from ingest_api.grpc.clients import ClientRegistry
from ingest_api.grpc.settings import GroupPolicy, ServerSettings, merged_settings
from ingest_api.grpc.status import ok
from ingest_api.grpc.v2 import definition_pb2 as pb
from ingest_api.grpc.v2 import service_pb2 as spb

GroupPolicies = Callable[[str], Awaitable[GroupPolicy | None]]
#: ``admit(command)``: ``None`` to go on, else the status that refuses it.
Admission = Callable[[spb.TelemetryCommand], pb.Status | None]


def _admit_all(_: spb.TelemetryCommand) -> pb.Status | None:
    return None


class TelemetrySession:
    """The server side of one Telemetry stream (a :class:`~ingest_api.grpc.clients.TelemetryStream`)."""

    def __init__(
        self,
        client_id: str,
        registry: ClientRegistry,
        group_policy: GroupPolicies,
        server: ServerSettings,
        admit: Admission = _admit_all,
    ) -> None:
        self.client_id = client_id
        self._admit = admit
        self._registry = registry
        self._group_policy = group_policy
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._outbox: asyncio.Queue[spb.TelemetryCommand | BaseException | None] = asyncio.Queue()
        self._closed = False

    def push(self, command: spb.TelemetryCommand) -> bool:
        """Queue ``command`` for the client (thread-safe); ``False`` once the stream ended."""
        if self._closed:
            return False
        try:
            self._loop.call_soon_threadsafe(self._outbox.put_nowait, command)
        except RuntimeError:  # the door's event loop has closed
            self._closed = True
            return False
        return True

    async def run(self, inbound: AsyncIterator[spb.TelemetryCommand]) -> AsyncIterator[spb.TelemetryCommand]:
        """The outbound stream: settings replies and pushed commands, until the client closes
        its side. Raises :class:`~ingest_api.grpc.status.GrpcRefusal` for settings the server
        refuses, and what the inbound side raised."""
        reader = asyncio.create_task(self._read(inbound))
        try:
            while True:
                item = await self._outbox.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self._closed = True
            reader.cancel()
            self._registry.detach(self.client_id, self)

    async def _read(self, inbound: AsyncIterator[spb.TelemetryCommand]) -> None:
        try:
            async for command in inbound:
                refused = self._admit(command)
                if refused is not None:
                    self._outbox.put_nowait(spb.TelemetryCommand(status=refused))
                    break
                if command.WhichOneof("command") == "settings":
                    self._outbox.put_nowait(await self._answer(command))
        except Exception as exc:  # a refusal, or the client's side failing: end the stream with it
            self._outbox.put_nowait(exc)
            return
        self._outbox.put_nowait(None)

    async def _answer(self, command: spb.TelemetryCommand) -> spb.TelemetryCommand:
        client = command.settings
        group = None
        if client.WhichOneof("pub_sub") == "subscription":
            group = await self._group_policy(client.subscription.group.name)
        settings = merged_settings(client, group, self._server)
        self._registry.register(self.client_id, settings, self)
        return spb.TelemetryCommand(status=ok(), settings=settings)
