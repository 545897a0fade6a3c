"""The remoting server shell on raw sockets: bad input closes one connection and nothing else,
unknown codes and handler faults are answered, one-way requests are not, requests on one
connection run concurrently, and the server can call the client back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest_api.remoting.codec import RemotingCommand, encode_command, request, response_to
from ingest_api.remoting.codes import FLAG_RESPONSE, RequestCode, ResponseCode, SerializeType
from ingest_api.remoting.connection import Connection
from ingest_api.remoting.headers import GetMinOffsetRequest, OffsetResponse
from ingest_api.remoting.server import HandlerTable, RemotingServerConfig, RemotingServerThread
from tests.remoting.rawclient import RawClient
from tests.support.tls import TestCA
from tests.support.waiting import wait_until

MAX_FRAME = 4096


class Door:
    """A handler table with observable effects (what a real door's handlers would touch)."""

    def __init__(self) -> None:
        self.oneway_offsets: list[str] = []
        self.connections: list[Connection] = []
        self.gate = asyncio.Event()

    def table(self) -> HandlerTable:
        return {
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.GET_MAX_OFFSET: self.fault,
            RequestCode.PULL_MESSAGE: self.wait_for_gate,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.open_gate,
        }

    async def heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        conn.client_id = cmd.body.decode()
        self.connections.append(conn)
        return response_to(cmd, ResponseCode.SUCCESS, body=b"hb:" + cmd.body)

    async def update_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if "slow" in cmd.ext_fields:  # still running when the client hangs up
            await asyncio.sleep(0.3)
        self.oneway_offsets.append(cmd.ext_fields["commitOffset"])
        return response_to(cmd, ResponseCode.SUCCESS)  # must not be sent: the request is one-way

    async def min_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = GetMinOffsetRequest.from_ext_fields(cmd.ext_fields)
        return response_to(
            cmd, ResponseCode.SUCCESS, ext_fields=OffsetResponse(header.queue_id * 10).to_ext_fields()
        )

    async def fault(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        raise RuntimeError("disk on fire")

    async def wait_for_gate(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        await self.gate.wait()
        return response_to(cmd, ResponseCode.SUCCESS, remark="released")

    async def open_gate(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.gate.set()
        return response_to(cmd, ResponseCode.SUCCESS, remark="opened")


@pytest.fixture
def door() -> Door:
    return Door()


@pytest.fixture
def server(door: Door) -> Iterator[RemotingServerThread]:
    config = RemotingServerConfig(host="127.0.0.1", port=0, max_frame_bytes=MAX_FRAME)
    with RemotingServerThread(door.table(), config) as running:
        yield running


def client(server: RemotingServerThread) -> RawClient:
    return RawClient("127.0.0.1", server.port)


def assert_serving(server: RemotingServerThread) -> None:
    """A fresh connection is answered: the listener survived whatever came before."""
    with client(server) as c:
        c.send(request(RequestCode.GET_MIN_OFFSET, 41, {"topic": "T", "queueId": "3"}))
        answer = c.recv()
    assert (answer.code, answer.opaque, answer.ext_fields) == (ResponseCode.SUCCESS, 41, {"offset": "30"})


def test_answers_in_the_request_encoding(server: RemotingServerThread) -> None:
    with client(server) as c:
        for opaque, kind in enumerate(SerializeType):
            c.send(request(RequestCode.HEART_BEAT, opaque, body=b"c1", serialize_type=kind))
            answer = c.recv()
            assert (answer.opaque, answer.serialize_type, answer.flag, answer.body) == (
                opaque,
                kind,
                FLAG_RESPONSE,
                b"hb:c1",
            )


def test_length_over_the_cap_closes_only_that_connection(
    server: RemotingServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING), client(server) as bystander, client(server) as c:
        c.send_raw((MAX_FRAME + 1).to_bytes(4, "big") + b"\x00" * 64)
        assert c.closed_by_server()
        bystander.send(request(RequestCode.HEART_BEAT, 1, body=b"b"))
        assert bystander.recv().body == b"hb:b"
    assert "exceeds the limit of 4096" in caplog.text
    assert_serving(server)


def test_truncated_frame_closes_the_connection(server: RemotingServerThread) -> None:
    with client(server) as c:
        frame = encode_command(request(RequestCode.HEART_BEAT, 1, body=b"x" * 50))
        c.send_raw(frame[:-10])
        c.sock.shutdown(2 - 1)  # SHUT_WR: the rest never comes
        assert c.closed_by_server()
    assert_serving(server)


def test_garbage_json_closes_the_connection(server: RemotingServerThread) -> None:
    with client(server) as c:
        garbage = b'{"code":34,"opaque":'
        c.send_raw((4 + len(garbage)).to_bytes(4, "big") + len(garbage).to_bytes(4, "big") + garbage)
        assert c.closed_by_server()
    assert_serving(server)


def test_unknown_code_is_answered_and_the_connection_stays(server: RemotingServerThread) -> None:
    with client(server) as c:
        c.send(request(9999, 5, {"x": "y"}))
        answer = c.recv()
        assert (answer.code, answer.opaque) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, 5)
        assert answer.remark is not None and "9999" in answer.remark
        c.send(request(RequestCode.HEART_BEAT, 6, body=b"again"))
        assert c.recv().body == b"hb:again"


def test_oneway_request_is_served_but_never_answered(server: RemotingServerThread, door: Door) -> None:
    with client(server) as c:
        c.send(request(RequestCode.UPDATE_CONSUMER_OFFSET, 7, {"commitOffset": "12"}, oneway=True))
        c.send(request(9999, 8, oneway=True))  # unknown and one-way: not answered either
        c.send(request(RequestCode.HEART_BEAT, 9, body=b"after"))
        answer = c.recv()
        assert (answer.opaque, answer.body) == (9, b"hb:after")
    wait_until(lambda: door.oneway_offsets == ["12"], 5.0, "the one-way offset update to run")


def test_one_way_requests_are_carried_out_after_the_client_hangs_up(door: Door) -> None:
    """A client's last offset commits are one-way and sent just before it closes: those running
    and those still waiting for a slot (2 here) are all applied after the connection is gone."""
    config = RemotingServerConfig(host="127.0.0.1", port=0, max_in_flight_per_connection=2)
    with RemotingServerThread(door.table(), config) as running, client(running) as c:
        for offset in range(5):
            fields = {"commitOffset": str(offset), "slow": "1"}
            c.send(request(RequestCode.UPDATE_CONSUMER_OFFSET, offset, fields, oneway=True))
        c.close()
        wait_until(lambda: sorted(door.oneway_offsets) == ["0", "1", "2", "3", "4"], 5.0, "every commit")


def test_handler_faults_are_answered_and_serving_goes_on(server: RemotingServerThread) -> None:
    with client(server) as c:
        c.send(request(RequestCode.GET_MAX_OFFSET, 10))
        answer = c.recv()
        assert (answer.code, answer.opaque, answer.remark) == (ResponseCode.SYSTEM_ERROR, 10, "disk on fire")
        c.send(request(RequestCode.GET_MIN_OFFSET, 11, {"topic": "T"}))  # queueId missing
        answer = c.recv()
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark == "GetMinOffsetRequest: the field <queueId> is missing"
        c.send(request(RequestCode.GET_MIN_OFFSET, 12, {"topic": "T", "queueId": "2"}))
        assert c.recv().ext_fields == {"offset": "20"}


def test_requests_on_one_connection_run_concurrently(server: RemotingServerThread) -> None:
    """A parked request (a long-polling pull) does not hold up the next one on its connection."""
    with client(server) as c:
        c.send(request(RequestCode.PULL_MESSAGE, 20))
        c.send(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 21))
        first, second = c.recv(), c.recv()
    assert [(first.opaque, first.remark), (second.opaque, second.remark)] == [
        (21, "opened"),
        (20, "released"),
    ]


def test_pipelined_frames_in_one_write_are_all_answered_by_opaque(server: RemotingServerThread) -> None:
    """Frames that arrive together (and one split across writes) are each served; the answers
    carry their request's opaque, whatever order they come back in."""
    frames = b"".join(
        encode_command(request(RequestCode.GET_MIN_OFFSET, 100 + n, {"topic": "T", "queueId": str(n)}))
        for n in range(8)
    )
    with client(server) as c:
        c.send_raw(frames[:-5])
        c.send_raw(frames[-5:])
        answers = {answer.opaque: answer.ext_fields["offset"] for answer in (c.recv() for _ in range(8))}
    assert answers == {100 + n: str(n * 10) for n in range(8)}


def test_every_request_passes_the_guard_before_its_handler(door: Door) -> None:
    seen: list[tuple[int, int]] = []

    async def guard(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        seen.append((cmd.code, cmd.opaque))
        if cmd.ext_fields.get("AccessKey") != "ok":
            return response_to(cmd, ResponseCode.NO_PERMISSION, "no rights")
        return None

    config = RemotingServerConfig(host="127.0.0.1", port=0)
    with RemotingServerThread(door.table(), config, guard=guard) as running, client(running) as c:
        c.send(request(RequestCode.UPDATE_CONSUMER_OFFSET, 1, {"commitOffset": "5"}))
        answer = c.recv()
        assert (answer.code, answer.opaque, answer.remark) == (ResponseCode.NO_PERMISSION, 1, "no rights")
        c.send(request(RequestCode.GET_MIN_OFFSET, 2, {"topic": "T", "queueId": "1", "AccessKey": "ok"}))
        assert c.recv().ext_fields == {"offset": "10"}
    assert seen == [(RequestCode.UPDATE_CONSUMER_OFFSET, 1), (RequestCode.GET_MIN_OFFSET, 2)]
    assert door.oneway_offsets == []  # the refused request never reached its handler


def test_server_calls_the_client_back(server: RemotingServerThread, door: Door) -> None:
    with client(server) as c:
        c.send(request(RequestCode.HEART_BEAT, 1, body=b"producer@1", serialize_type=SerializeType.ROCKETMQ))
        c.recv()
        (conn,) = door.connections
        assert conn.client_id == "producer@1" and conn.peer_host == "127.0.0.1"
        check = asyncio.run_coroutine_threadsafe(
            conn.invoke(RequestCode.CHECK_TRANSACTION_STATE, {"commitLogOffset": "0"}, b"half"), server.loop
        )
        asked = c.recv()
        assert (asked.code, asked.is_response, asked.serialize_type, asked.body) == (
            RequestCode.CHECK_TRANSACTION_STATE,
            False,
            SerializeType.ROCKETMQ,
            b"half",
        )
        c.send(response_to(asked, ResponseCode.SUCCESS, remark="checked"))
        assert check.result(5.0).remark == "checked"
        oneway = asyncio.run_coroutine_threadsafe(
            conn.invoke_oneway(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "G"}), server.loop
        )
        oneway.result(5.0)
        notified = c.recv()
        assert notified.is_oneway and notified.ext_fields == {"consumerGroup": "G"}


def test_tls(tmp_path: Path, door: Door) -> None:
    ca = TestCA(tmp_path)
    config = RemotingServerConfig(host="127.0.0.1", port=0, ssl_context=ca.server_context(ca.issue("broker")))
    with RemotingServerThread(door.table(), config) as running:
        with RawClient("127.0.0.1", running.port, tls=ca.client_context()) as c:
            c.send(request(RequestCode.HEART_BEAT, 1, body=b"secure"))
            assert c.recv().body == b"hb:secure"
        with RawClient("127.0.0.1", running.port) as plain:  # no handshake: not served
            plain.send_raw(encode_command(request(RequestCode.HEART_BEAT, 2)))
            assert plain.closed_by_server()
