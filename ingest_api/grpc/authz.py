"""Who calls the gRPC door, and may they: RocketMQ 5's signature, then the one ``authorize``.

With ``--auth-file`` every served RPC goes through :meth:`CallGuard.admit` before anything
else (the proxy's pipeline: authentication, then authorization, then the client-id check and
the request's own validation), so a refused call reads or stores nothing.

**Authentication** (the proxy's ``AuthenticationPipeline``): the call's ``authorization``
metadata (:mod:`broker.security.grpc_signature`) names an access key of the users file
(``DoorAuth.by_access_key``) and signs the call's ``x-mq-date-time`` with its secret key. A
missing or malformed header, a missing date, an unknown access key or a wrong signature is
refused; the last two with one text, so an unknown key reads like a wrong secret (and costs the
same HMAC). The signature is re-checked on every call against the *current* users file (a
reload applies to the next call; a Telemetry stream is re-checked on every command).

**Authorization**: :data:`RPC_RIGHTS`, one row per RPC of what it needs on which names of the
request, each asked of :func:`broker.security.authorize` (Kafka's operations, as the Kafka door
asks them: its Metadata needs DESCRIBE topic, as QueryRoute does here)::

    RPC                                 needs                                    (proxy: ACL 2.0)
    QueryRoute                          DESCRIBE topic                           Pub|Sub topic
    QueryAssignment                     DESCRIBE topic                           Sub topic + group
    SendMessage                         WRITE every topic of its messages        Pub topic
    EndTransaction                      WRITE topic                              Pub topic
    ReceiveMessage                      READ topic, READ group                   Sub topic + group
    AckMessage                          READ topic, READ group                   Sub topic + group
    ChangeInvisibleDuration             READ topic, READ group                   Sub group
    ForwardMessageToDeadLetterQueue     READ topic, READ group                   Sub topic + group
    Heartbeat, NotifyClientTermination  READ group when one is named             Sub group
    Telemetry (each settings command)   WRITE each topic it publishes to,        Pub topics,
                                        READ group when subscribing              Sub group + topics

A Telemetry stream's publishing settings register the client as a producer of those topics,
which is who the broker sends its check-backs to (a half message each): so, as in the proxy,
only a writer of the topics may register.

A route query (QueryRoute, QueryAssignment) creates a missing topic, as a first produce does,
only for a caller with WRITE or CREATE on it (or CREATE on the cluster); anyone else holding
DESCRIBE gets ``TOPIC_NOT_FOUND`` (the Kafka door's Metadata: CREATE to auto-create).

**Answers.** The proxy's ``ResponseBuilder.buildStatus`` answers an ``AuthenticationException``
*and* an ``AuthorizationException`` with ``Code.UNAUTHORIZED`` (40100), never ``FORBIDDEN``
(40300, which it keeps for "no writable/readable queue"); so does this door, and the clients
raise ``UnauthorizedException`` for both. Unary RPCs answer ``{status}``; ReceiveMessage writes
one ``{status}`` and ends; a Telemetry stream writes one ``{status}`` command and ends (the
proxy's ``ResponseWriter.write`` completes the stream). The texts never carry a credential;
refusals are logged at DEBUG with the principal, the right and the resource, never the header.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from google.protobuf.message import Message as ProtoMessage

from broker.auth import DoorAuth, may_create_topic
from broker.security import Operation, Principal, ResourceType, authorize
from broker.security.errors import GENERIC_FAILURE, MalformedAuthorization
from broker.security.grpc_signature import (
    AUTHORIZATION_KEY,
    DATE_TIME_KEY,
    parse_authorization,
    verify,
)
from ingest_api.grpc.status import Code, status
from ingest_api.grpc.v2 import definition_pb2 as pb
from ingest_api.grpc.v2 import service_pb2 as spb

log = logging.getLogger(__name__)

_T, _G = ResourceType.TOPIC, ResourceType.GROUP
_R, _W, _D = Operation.READ, Operation.WRITE, Operation.DESCRIBE


@dataclass(frozen=True, slots=True)
class Need:
    """One right a request needs: ``operation`` on each ``resource_type`` name that ``names``
    finds in the request (empty names are skipped: nothing named, nothing to check)."""

    resource_type: ResourceType
    operation: Operation
    names: Callable[[Any], Iterable[str]]


def _topic(request: Any) -> list[str]:
    return [request.topic.name]


def _group(request: Any) -> list[str]:
    return [request.group.name]


def _message_topics(request: spb.SendMessageRequest) -> list[str]:
    return sorted({message.topic.name for message in request.messages})


def _queue_topic(request: spb.ReceiveMessageRequest) -> list[str]:
    return [request.message_queue.topic.name]


def _settings_of(command: spb.TelemetryCommand, pub_sub: str) -> pb.Settings | None:
    """The command's settings when it carries settings of kind ``pub_sub``."""
    if command.WhichOneof("command") != "settings" or command.settings.WhichOneof("pub_sub") != pub_sub:
        return None
    return command.settings


def _subscribed_group(command: spb.TelemetryCommand) -> list[str]:
    settings = _settings_of(command, "subscription")
    return [] if settings is None else [settings.subscription.group.name]


def _published_topics(command: spb.TelemetryCommand) -> list[str]:
    settings = _settings_of(command, "publishing")
    return [] if settings is None else sorted({t.name for t in settings.publishing.topics})


_CONSUME = (Need(_T, _R, _topic), Need(_G, _R, _group))


#: Request type -> what it needs (the module doc's table). A served RPC missing here is refused.
RPC_RIGHTS: Mapping[type[ProtoMessage], tuple[Need, ...]] = MappingProxyType(
    {
        spb.QueryRouteRequest: (Need(_T, _D, _topic),),
        spb.QueryAssignmentRequest: (Need(_T, _D, _topic),),
        spb.SendMessageRequest: (Need(_T, _W, _message_topics),),
        spb.EndTransactionRequest: (Need(_T, _W, _topic),),
        spb.ReceiveMessageRequest: (Need(_T, _R, _queue_topic), Need(_G, _R, _group)),
        spb.AckMessageRequest: _CONSUME,
        spb.ChangeInvisibleDurationRequest: _CONSUME,
        spb.ForwardMessageToDeadLetterQueueRequest: _CONSUME,
        spb.HeartbeatRequest: (Need(_G, _R, _group),),
        spb.NotifyClientTerminationRequest: (Need(_G, _R, _group),),
        spb.TelemetryCommand: (Need(_T, _W, _published_topics), Need(_G, _R, _subscribed_group)),
    }
)


def unauthorized(message: str) -> pb.Status:
    """The proxy's answer to a failed login or a denied call."""
    return status(Code.UNAUTHORIZED, message)


def metadata_of(context: Any) -> dict[str, str]:
    """The call's metadata as ``{key: value}`` (keys are lowercase in gRPC; the last one wins)."""
    return {str(key): str(value) for key, value in context.invocation_metadata() or ()}


class CallGuard:
    """The door's check of every call; ``auth=None`` (no ``--auth-file``) admits everything."""

    def __init__(self, auth: DoorAuth | None) -> None:
        self.auth = auth

    def admit(self, context: Any, request: Any) -> pb.Status | None:
        """``None`` when the call may go on, else the ``UNAUTHORIZED`` status to answer with."""
        if self.auth is None:
            return None
        principal = authenticate(self.auth, metadata_of(context))
        if isinstance(principal, pb.Status):
            log.debug("gRPC %s refused: %s", type(request).__name__, principal.message)
            return principal
        return authorize_call(principal, request)

    def may_create(self, context: Any, topic: str) -> bool:
        """Whether an admitted call's QueryRoute / QueryAssignment may create ``topic`` when it
        is missing (:func:`broker.auth.may_create_topic`)."""
        if self.auth is None:
            return True
        principal = authenticate(self.auth, metadata_of(context))
        if isinstance(principal, pb.Status):
            return False
        return may_create_topic(principal, topic)


def authenticate(auth: DoorAuth, metadata: Mapping[str, str]) -> Principal | pb.Status:
    """The caller's principal, or the ``UNAUTHORIZED`` status saying what is missing (never a
    credential: an unknown access key and a wrong signature both read :data:`GENERIC_FAILURE`)."""
    header = metadata.get(AUTHORIZATION_KEY)
    if not header:
        return unauthorized(
            f"{AUTHORIZATION_KEY} is required: give the client Credentials(access_key, secret)"
        )
    date_time = metadata.get(DATE_TIME_KEY)
    if not date_time:
        return unauthorized(f"{DATE_TIME_KEY} is required with {AUTHORIZATION_KEY}")
    try:
        credential = parse_authorization(header)
    except MalformedAuthorization as exc:  # its text names the rule, never the value
        return unauthorized(str(exc))
    if not credential.access_key:
        return unauthorized("the access key is empty: give the client Credentials(ak, sk)")
    found = auth.by_access_key(credential.access_key)
    if found is None:
        verify(credential, auth.mock_secret, date_time)  # the same cost as a known key
        return unauthorized(GENERIC_FAILURE)
    principal, secret_key = found
    if not verify(credential, secret_key, date_time):
        return unauthorized(GENERIC_FAILURE)
    return principal


def authorize_call(principal: Principal, request: Any) -> pb.Status | None:
    """``None`` when ``principal`` holds every right ``request`` needs (:data:`RPC_RIGHTS`),
    else the ``UNAUTHORIZED`` status naming the first one missing."""
    needs = RPC_RIGHTS.get(type(request))
    if needs is None:
        return unauthorized(f"{type(request).__name__} is not open to users")
    for need in needs:
        for name in need.names(request):
            if name and not authorize(principal, need.operation, (need.resource_type, name)):
                what = f"{need.operation.value} {need.resource_type.value} {name!r}"
                log.debug("gRPC %s denied: %r may not %s", type(request).__name__, principal.name, what)
                return unauthorized(f"{principal.name!r} may not {what}")
    return None
