"""ali-ons against a replicated cluster (real ZooKeeper, broker ``b1`` as two ``sparkmq serve``
processes, master and slave, each with ``--remoting-port``): routes from the cluster's (master
``brokerId 0``, slave ``1``), what ali-ons and a batch send are read over HTTP with the same keys,
tags and UNIQ_KEY, a write at the slave refused, a pull at the slave served, two push consumers
of one group splitting the queues, and ``kill -9`` of the master mid-stream losing nothing the
producer saw acknowledged, the route then naming the new master."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from ingest_api.remoting.batch import BatchEntry, encode_batch
from ingest_api.remoting.bodies import TopicRouteData, decode_route
from ingest_api.remoting.codec import RemotingCommand, request
from ingest_api.remoting.codes import PULL_FLAG_SUSPEND, RequestCode, ResponseCode
from ingest_api.remoting.headers import SendMessageRequest, send_request_ext_fields
from tests.remoting.rawclient import RawClient
from tests.support.cluster import ProcessCluster
from tests.support.network import free_port
from tests.support.ons import _command, ensure_ali_ons, run_producer, start_consumer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

ARGS = ("--operators", "off", "--replication", "sync", "--min-insync", "1")
TOPIC = "RcT"


def _call(address: str, cmd: RemotingCommand) -> RemotingCommand:
    host, _, port = address.rpartition(":")
    with RawClient(host, int(port)) as client:
        client.send(cmd)
        return client.recv()


def _route(address: str) -> TopicRouteData:
    answer = _call(address, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 1, {"topic": TOPIC}))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return decode_route(answer.body)


def _members(cluster: ProcessCluster, via: str = "b1-b") -> dict[int, str]:
    group = next(b for b in cluster.describe(via)["brokers"] if b["name"] == "b1")
    return {m["member_id"]: m["role"] for m in group.get("members") or []}


def _start(cluster: ProcessCluster, member: str) -> str:
    port = free_port()
    cluster.add("b1", ha=True, args=(*ARGS, "--remoting-port", str(port)), member=member)
    return f"127.0.0.1:{port}"


def _send_header(queue_id: int) -> dict[str, str]:
    header = SendMessageRequest(
        producer_group="PG",
        topic=TOPIC,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        flag=0,
    )
    return send_request_ext_fields(header, v2=True)


def _http_messages(cluster: ProcessCluster, via: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with cluster.http(via) as http:
        for queue in (0, 1):
            page = http.get(
                f"/topics/{TOPIC}/queues/{queue}/messages", params={"offset": 0, "max_messages": 1000}
            )
            assert page.status_code == 200, page.text
            out += page.json()["messages"]
    return out


def _stream(name_srv: str, count: int) -> tuple[subprocess.Popen[str], list[dict[str, Any]]]:
    """An ali-ons producer sending ``count`` messages; its ``sent`` lines gathered as they come."""
    options = {"nameSrv": name_srv, "topic": TOPIC, "producerGroup": "PG_STREAM", "count": count,
               "template": {"body": "stream"}}  # fmt: skip
    process = subprocess.Popen(
        _command("producer.js", options), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    sent: list[dict[str, Any]] = []

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("{") and json.loads(line).get("event") == "sent":
                sent.append(json.loads(line))

    threading.Thread(target=pump, daemon=True).start()
    return process, sent


def test_ali_ons_on_a_replicated_cluster(tmp_path: Path) -> None:
    ensure_ali_ons()
    with ProcessCluster.started(tmp_path, []) as cluster:
        master = _start(cluster, "b1-a")
        wait_until(lambda: "master" in _members(cluster, "b1-a").values(), 30, "b1-a to lead")
        slave = _start(cluster, "b1-b")
        wait_until(lambda: sorted(_members(cluster).values()) == ["master", "slave"], 30, "b1-b in sync")
        with cluster.http("b1-a") as http:
            assert http.put(f"/topics/{TOPIC}", json={"queues": 2}).status_code == 201
        route = _route(slave)
        assert [(q.broker_name, q.write_queue_nums, q.perm) for q in route.queue_datas] == [("b1", 2, 6)]
        assert dict(route.broker_datas[0].broker_addrs) == {0: master, 1: slave}

        # ali-ons (name server: the slave) sends to the master; a batch goes over the raw codec
        sent = run_producer(
            slave, TOPIC, [{"body": f"n-{i}", "tags": "TA", "keys": [f"k-{i}"]} for i in range(4)]
        )
        batch = [
            BatchEntry(0, f"b-{i}".encode(), {"TAGS": "TB", "KEYS": f"bk-{i}", "UNIQ_KEY": f"{i:032X}"})
            for i in range(3)
        ]
        answer = _call(
            master, request(RequestCode.SEND_BATCH_MESSAGE, 2, _send_header(1), encode_batch(batch))
        )
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        stored = {m["body"]: m for m in _http_messages(cluster, "b1-a")}
        for i, s in enumerate(sent):
            seen = stored[f"n-{i}"]
            assert (seen["tags"], seen["keys"], seen["msg_id"]) == ("TA", [f"k-{i}"], s["msgId"])
        for i in range(3):
            assert (stored[f"b-{i}"]["tags"], stored[f"b-{i}"]["uniq_key"]) == ("TB", f"{i:032X}")

        refused = _call(slave, request(RequestCode.SEND_MESSAGE_V2, 3, _send_header(0), b"at the slave"))
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, refused.remark
        pull = {"consumerGroup": "GP", "topic": TOPIC, "queueId": "1", "queueOffset": "0",
                "maxMsgNums": "32", "sysFlag": str(PULL_FLAG_SUSPEND), "commitOffset": "0",
                "suspendTimeoutMillis": "0", "subVersion": "0"}  # fmt: skip
        at_slave = _call(slave, request(RequestCode.PULL_MESSAGE, 4, pull))
        assert at_slave.code == ResponseCode.SUCCESS, at_slave.remark
        assert at_slave.ext_fields["suggestWhichBrokerId"] == "0"

        with cluster.http("b1-a") as http:
            assert http.put("/topics/RcSplit", json={"queues": 2}).status_code == 201
        first = start_consumer(slave, "G_CL", "RcSplit", instanceName="c1")
        second = start_consumer(slave, "G_CL", "RcSplit", instanceName="c2")
        try:
            first.wait_ready(60)
            second.wait_ready(60)

            def split() -> bool:
                a, b = first.queues or [], second.queues or []
                return bool(a and b) and sorted(a + b) == [0, 1]

            wait_until(split, 60, "the two consumers to split the two queues")
            sent_split = run_producer(slave, "RcSplit", [{"body": f"s-{i}"} for i in range(12)])
            everything = {s["msgId"] for s in sent_split}
            wait_until(
                lambda: {r["msgId"] for r in first.received + second.received} == everything,
                60,
                "every message at one of the consumers",
            )
        finally:
            first.stop()
            second.stop()
        ids = [r["msgId"] for r in first.received + second.received]
        assert len(ids) == len(set(ids)) == 12
        assert first.received and second.received

        process, streamed = _stream(slave, 400)
        wait_until(lambda: len(streamed) >= 50, 60, "the stream to start")
        cluster.brokers["b1-a"].kill()
        wait_until(
            lambda: dict(_route(slave).broker_datas[0].broker_addrs) == {0: slave}, 60, "the new master"
        )
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()
        acked = {s["msgId"] for s in streamed}
        after = {m["msg_id"] for m in _http_messages(cluster, "b1-b")}
        assert acked <= after, f"{len(acked - after)} acknowledged messages lost"
