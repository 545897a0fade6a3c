"""The gRPC door on a broker with ``--auth-file``: RocketMQ 5's signature and the RPCs' rights.

One broker for the module (a users file with access keys, the door on a free port). The
official Python client (its own venv) sends and receives with its ``Credentials(ak, sk)``; raw
calls through the door's own stubs send what the client cannot (no header, a malformed one, an
unknown key) and look at the answers' shape. Every log record of the module, at DEBUG, is kept
and searched for the secrets and the signatures at the end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from broker.config import ServerConfig
from broker.security import User, hash_token
from broker.security.acl import Grant, Operation, Permission, ResourceType
from broker.security.errors import GENERIC_FAILURE
from broker.security.grpc_signature import format_authorization
from broker.security.users import AccessKey
from ingest_api.grpc.companion import GrpcCompanion
from ingest_api.grpc.status import Code
from ingest_api.grpc.v2 import definition_pb2 as pb
from ingest_api.grpc.v2 import service_pb2 as spb
from ingest_api.grpc.v2 import service_pb2_grpc
from tests.grpc.door_fixtures import DoorBroker
from tests.ingest.conftest import start_broker
from tests.support.reads import all_messages
from tests.support.rocketmq5 import run_client
from tests.support.secure_broker import write_users_file
from tests.support.stores import light_config

ADMIN_TOKEN = "admin-token-grpc-7c1d9e04aa"
KEYS = {  # unique strings, so that the log search finds any copy
    "admin": AccessKey("AKADMIN01", "admin-sk-plugh-6071"),
    "alice": AccessKey("AKALICE01", "alice-sk-xyzzy-2718"),
    "carol": AccessKey("AKCAROL01", "carol-sk-thud-31415"),
}
#: Signatures the raw calls sent (hex), searched for in the logs at the end.
SENT_SIGNATURES: list[str] = []


def users() -> list[User]:
    """admin: superuser; alice: produce and consume ``orders*`` (READ on every group); carol:
    READ on ``orders*`` topics only (so DESCRIBE), no group, no WRITE."""
    carol_reads = Grant(ResourceType.TOPIC, "orders*", frozenset({Operation.READ}), Permission.ALLOW)
    return [
        User("admin", token_hashes=(hash_token(ADMIN_TOKEN),), access_keys=(KEYS["admin"],), superuser=True),
        User("alice", access_keys=(KEYS["alice"],), produce=("orders*",), consume=("orders*",)),
        User("carol", access_keys=(KEYS["carol"],), rights=(carol_reads,)),
    ]


class KeptRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture(scope="module")
def kept_logs() -> Iterator[KeptRecords]:
    handler = KeptRecords()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pytest.fixture(scope="module")
def door(
    tmp_path_factory: pytest.TempPathFactory, rocketmq5: Path, kept_logs: KeptRecords
) -> Iterator[DoorBroker]:
    tmp = tmp_path_factory.mktemp("grpc-auth")
    config = ServerConfig(
        store=light_config(tmp / "store"), auth_file=write_users_file(tmp / "users.json", users())
    )
    companion = GrpcCompanion(port=0)
    running = start_broker(config, companions=[companion])
    try:
        door = DoorBroker(running, companion, tmp / "home")
        with running.client(ADMIN_TOKEN) as http:
            for topic in ("orders-ok", "orders-denied", "orders-held"):
                assert http.put(f"/topics/{topic}", json={"queues": 2}).status_code in (200, 201)
        yield door
    finally:
        running.stop()


@dataclass
class Probe:
    lines: list[dict[str, Any]]
    #: The client's own log (``~/logs/rocketmq_python/``): where it logs what it swallowed.
    client_log: str


def probe(door: DoorBroker, home: Path, who: str, secret: str | None = None, **argument: Any) -> Probe:
    """Run ``auth_probe.py`` as ``who`` (with ``secret`` instead of theirs) in ``home``."""
    key = KEYS[who]
    credentials = {"access_key": key.access_key, "secret_key": secret or key.secret_key}
    lines = run_client("auth_probe.py", {"endpoint": door.endpoint, **credentials, **argument}, home)
    return Probe(lines, (home / "logs" / "rocketmq_python" / "rocketmq_client.log").read_text())


def refused(step: str, message: str) -> dict[str, Any]:
    """The probe's line for an ``UnauthorizedException`` (the client prefixes the code)."""
    code = Code.UNAUTHORIZED
    return {"error": "UnauthorizedException", "code": code, "step": step, "message": f"{code}, {message}"}


def stored(door: DoorBroker, topic: str) -> list[dict[str, Any]]:
    with door.running.client(ADMIN_TOKEN) as http:
        return all_messages(http, topic)


# --- the official client ----------------------------------------------------------------------


def test_an_allowed_user_sends_and_receives(door: DoorBroker, tmp_path: Path) -> None:
    bodies = ["one", "two", "three"]
    receive = {"group": "billing", "want": 3, "timeout_s": 20}
    lines = probe(door, tmp_path, "alice", topic="orders-ok", send=bodies, receive=receive).lines
    assert lines[-1] == {"done": True}, lines
    assert sorted(line["received"] for line in lines if "received" in line) == sorted(bodies)
    assert sorted(m["body"] for m in stored(door, "orders-ok")) == sorted(bodies)


def test_a_wrong_secret_is_unauthorized(door: DoorBroker, tmp_path: Path) -> None:
    run = probe(door, tmp_path, "alice", secret="alice-sk-wrong-0000", topic="orders-ok", send=["never"])
    # the client swallows its route query's UnauthorizedException (it logs it) and raises a
    # plain Exception when the send finds no route
    assert run.lines == [
        {
            "error": "Exception",
            "code": None,
            "step": "send",
            "message": "failed to fetch topic:orders-ok route.",
        }
    ]
    assert f"query topic raise exception, {Code.UNAUTHORIZED}, {GENERIC_FAILURE}" in run.client_log


def test_a_send_without_write_is_refused_and_stores_nothing(door: DoorBroker, tmp_path: Path) -> None:
    lines = probe(door, tmp_path, "carol", topic="orders-denied", send=["forbidden"]).lines
    assert lines == [refused("send", "'carol' may not write topic 'orders-denied'")]
    assert stored(door, "orders-denied") == []  # read back by the superuser


def test_a_receive_without_group_read_is_refused(door: DoorBroker, tmp_path: Path) -> None:
    assert probe(door, tmp_path / "alice", "alice", topic="orders-held", send=["kept"]).lines[-1] == {
        "done": True
    }
    receive = {"group": "billing", "want": 1, "timeout_s": 10}
    lines = probe(door, tmp_path / "carol", "carol", topic="orders-held", receive=receive).lines
    assert lines == [refused("receive", "'carol' may not read group 'billing'")]
    assert [m["body"] for m in stored(door, "orders-held")] == ["kept"]


# --- raw calls --------------------------------------------------------------------------------


def signed(who: str, secret: str | None = None, client_id: str = "raw@1@0@test") -> list[tuple[str, str]]:
    """The metadata an official client sends, signed now by ``who`` (with ``secret`` instead)."""
    key = KEYS[who] if who in KEYS else AccessKey(who, "unknown-sk-000")
    date_time = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    authorization = format_authorization(key.access_key, (secret or key.secret_key).encode(), date_time)
    SENT_SIGNATURES.append(authorization.rsplit("=", 1)[1])
    return [("x-mq-client-id", client_id), ("x-mq-date-time", date_time), ("authorization", authorization)]


@pytest.fixture
def stub(door: DoorBroker) -> Iterator[Any]:
    with grpc.insecure_channel(door.endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]


def route(stub: Any, topic: str, metadata: list[tuple[str, str]]) -> pb.Status:
    request = spb.QueryRouteRequest(topic=pb.Resource(name=topic))
    answer: spb.QueryRouteResponse = stub.QueryRoute(request, metadata=metadata, timeout=10)
    return answer.status


def test_raw_calls_without_valid_credentials_are_unauthorized(stub: Any) -> None:
    no_header = [("x-mq-client-id", "raw@1@0@test"), ("x-mq-date-time", "20261127T152316Z")]
    cases = {
        "no authorization": (no_header, "authorization is required"),
        "no signature": ([*no_header, ("authorization", "MQv2-HMAC-SHA1 Credential=AKALICE01")], "needs"),
        "malformed": ([*no_header, ("authorization", "MQv2-HMAC-SHA1 Credential=AK, Signed")], "NAME=VALUE"),
        "not hex": (
            [*no_header, ("authorization", "MQv2-HMAC-SHA1 Credential=AKALICE01, Signature=xyzzy")],
            "not hex",
        ),
        "no date": ([m for m in signed("alice") if m[0] != "x-mq-date-time"], "x-mq-date-time is required"),
        "unknown access key": (signed("AKNOBODY9"), GENERIC_FAILURE),
        "wrong secret": (signed("alice", secret="alice-sk-wrong-1111"), GENERIC_FAILURE),
        "empty credentials": (signed("", secret="-"), "access key is empty"),
    }
    for name, (metadata, text) in cases.items():
        status = route(stub, "orders-ok", metadata)
        assert (status.code, text in status.message) == (Code.UNAUTHORIZED, True), (name, status)
    assert route(stub, "orders-ok", signed("alice")).code == Code.OK


def test_a_denied_raw_send_is_unauthorized_and_stores_nothing(door: DoorBroker, stub: Any) -> None:
    message = pb.Message(
        topic=pb.Resource(name="orders-denied"),
        body=b"raw and denied",
        system_properties=pb.SystemProperties(message_id="01AAAABBBBCCCCDDDD000000000000000A"),
    )
    request = spb.SendMessageRequest(messages=[message])
    answer = stub.SendMessage(request, metadata=signed("carol"), timeout=10)
    assert answer.status.code == Code.UNAUTHORIZED and not answer.entries
    assert "'carol' may not write topic 'orders-denied'" in answer.status.message
    assert stored(door, "orders-denied") == []


def test_a_denied_receive_answers_one_status_and_ends(stub: Any) -> None:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name="billing"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="orders-ok"), id=-1),
        batch_size=1,
    )
    answers = list(stub.ReceiveMessage(request, metadata=signed("carol"), timeout=10))
    assert [a.WhichOneof("content") for a in answers] == ["status"]
    assert answers[0].status.code == Code.UNAUTHORIZED and "read group 'billing'" in answers[0].status.message


def settings_command(group: str) -> spb.TelemetryCommand:
    subscription = pb.Subscription(
        group=pb.Resource(name=group),
        subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name="orders-ok"))],
    )
    settings = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=subscription)
    return spb.TelemetryCommand(settings=settings)


def test_telemetry_answers_a_denied_settings_command_with_its_status_and_ends(stub: Any) -> None:
    allowed = stub.Telemetry(iter([settings_command("billing")]), metadata=signed("alice"), timeout=10)
    replies = list(allowed)
    assert [r.status.code for r in replies] == [Code.OK] and replies[0].HasField("settings")
    denied = list(stub.Telemetry(iter([settings_command("billing")]), metadata=signed("carol"), timeout=10))
    assert [(r.status.code, r.HasField("settings")) for r in denied] == [(Code.UNAUTHORIZED, False)]
    wrong = list(stub.Telemetry(iter([settings_command("g")]), metadata=signed("alice", "x" * 8), timeout=10))
    assert [(r.status.code, r.status.message) for r in wrong] == [(Code.UNAUTHORIZED, GENERIC_FAILURE)]


def test_only_a_writer_or_creator_creates_a_topic_by_querying_its_route(door: DoorBroker, stub: Any) -> None:
    assert route(stub, "orders-fresh", signed("carol")).code == Code.TOPIC_NOT_FOUND  # DESCRIBE only
    assert not door.broker.store.has_topic("orders-fresh")
    assert route(stub, "orders-fresh", signed("alice")).code == Code.OK  # WRITE: created
    assert door.broker.store.has_topic("orders-fresh")
    assert route(stub, "orders-fresh", signed("carol")).code == Code.OK  # now it exists
    assert route(stub, "elsewhere", signed("carol")).code == Code.UNAUTHORIZED  # no DESCRIBE


# --- no secret in the logs --------------------------------------------------------------------


def test_no_secret_or_signature_is_logged(door: DoorBroker, stub: Any, kept_logs: KeptRecords) -> None:
    route(stub, "orders-ok", signed("alice"))
    route(stub, "orders-ok", signed("alice", secret="alice-sk-wrong-2222"))
    route(stub, "orders-ok", signed("AKNOBODY9"))
    text = "\n".join(kept_logs.lines)
    assert "gRPC QueryRouteRequest refused" in text  # DEBUG records were kept
    forbidden = [k.secret_key for k in KEYS.values()] + ["alice-sk-wrong", "MQv2-HMAC-SHA1", *SENT_SIGNATURES]
    assert [secret for secret in forbidden if secret in text] == []
