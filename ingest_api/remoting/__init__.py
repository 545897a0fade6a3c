"""RocketMQ remoting door: RocketMQ 4.x/5.x remoting clients (Java, C++, ali-ons) connect to sparkmq.

Layers: :mod:`~ingest_api.remoting.codes` (the numbers), :mod:`~ingest_api.remoting.codec` (frames
and both header encodings), :mod:`~ingest_api.remoting.headers` (typed custom headers),
:mod:`~ingest_api.remoting.bodies` (JSON and batch bodies), :mod:`~ingest_api.remoting.server`
(the asyncio listener over a handler table). See docs/remoting.md.
"""

from __future__ import annotations

from ingest_api.remoting.codec import RemotingCommand, decode_frame, encode_command, request, response_to
from ingest_api.remoting.connection import Connection
from ingest_api.remoting.door import RemotingDoor, start_remoting_door
from ingest_api.remoting.server import (
    Handler,
    HandlerTable,
    RemotingServer,
    RemotingServerConfig,
    RemotingServerThread,
    start_remoting_server,
)

__all__ = [
    "Connection",
    "Handler",
    "HandlerTable",
    "RemotingCommand",
    "RemotingDoor",
    "RemotingServer",
    "RemotingServerConfig",
    "RemotingServerThread",
    "decode_frame",
    "encode_command",
    "request",
    "response_to",
    "start_remoting_door",
    "start_remoting_server",
]
