"""Request and response bodies: the JSON documents (route, cluster info, heartbeat, consumer list,
lock batch, KV table). The binary message batch of SEND_BATCH_MESSAGE is in
:mod:`ingest_api.remoting.batch`.

JSON is written like fastjson writes it (keys in alphabetical order, compact) but with every map
key quoted: fastjson writes ``"brokerAddrs":{0:"host:port"}`` (an unquoted ``Long`` key), which
only lenient parsers read; ``{"0":"host:port"}`` is read by fastjson, ali-ons' ``JSON2`` and
every standard parser. Decoding accepts both (:func:`loads_lenient`).

Route body (``TopicRouteData``, GET_ROUTEINFO_BY_TOPIC)::

    {"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"},
                     "brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],
     "filterServerTable":{},
     "queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,
                    "writeQueueNums":4}]}

Pure functions; a body that does not decode raises :class:`BodyError` naming the body.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ingest_api.remoting.errors import BodyError

# --- JSON ------------------------------------------------------------------------------------------

#: An unquoted integer map key as fastjson writes it: ``{0:"a"`` or ``,1:"b"``.
_BARE_INT_KEY: Final = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")


def dumps(doc: object) -> bytes:
    """fastjson-like JSON: sorted keys, compact, UTF-8 unescaped."""
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8")


def loads_lenient(raw: bytes, what: str) -> Any:
    """Parse JSON, also accepting fastjson's unquoted integer map keys; raises BodyError."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(f"{what} body is not UTF-8: {exc}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        try:
            return json.loads(_BARE_INT_KEY.sub(r'\1"\2"\3', text))
        except ValueError:
            raise BodyError(f"{what} body is not JSON: {exc} (starts {text[:60]!r})") from exc


def _object(doc: object, what: str) -> Mapping[str, Any]:
    if not isinstance(doc, dict):
        raise BodyError(f"{what} must be a JSON object, got {type(doc).__name__}")
    return doc


def _list(doc: Mapping[str, Any], name: str, what: str) -> list[Any]:
    value = doc.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BodyError(f"{what}.{name} must be a JSON array, got {type(value).__name__}")
    return value


def _str(doc: Mapping[str, Any], name: str, what: str, default: str | None = None) -> str:
    value = doc.get(name, default)
    if not isinstance(value, str):
        raise BodyError(f"{what}.{name} must be a string, got {value!r}")
    return value


def _int(doc: Mapping[str, Any], name: str, what: str, default: int | None = None) -> int:
    value = doc.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BodyError(f"{what}.{name} must be an integer, got {value!r}")
    return value


# --- route and cluster -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueData:
    """One broker's queues of a topic. ``perm``: ``codes.PERM_READ | PERM_WRITE`` (6) etc."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @staticmethod
    def from_json(doc: object) -> QueueData:
        d = _object(doc, "queueData")
        return QueueData(
            broker_name=_str(d, "brokerName", "queueData"),
            read_queue_nums=_int(d, "readQueueNums", "queueData"),
            write_queue_nums=_int(d, "writeQueueNums", "queueData"),
            perm=_int(d, "perm", "queueData"),
            topic_sys_flag=_int(d, "topicSysFlag", "queueData", d.get("topicSynFlag", 0)),
        )


@dataclass(frozen=True, slots=True)
class BrokerData:
    """A broker name's replicas: ``broker_addrs`` maps brokerId (0 = master) to ``host:port``."""

    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerAddrs": {str(broker_id): addr for broker_id, addr in sorted(self.broker_addrs.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
            "enableActingMaster": False,
        }

    @staticmethod
    def from_json(doc: object) -> BrokerData:
        d = _object(doc, "brokerData")
        addrs = _object(d.get("brokerAddrs") or {}, "brokerData.brokerAddrs")
        try:
            parsed = {int(broker_id): str(addr) for broker_id, addr in addrs.items()}
        except ValueError as exc:
            raise BodyError(f"brokerData.brokerAddrs keys must be broker ids: {exc}") from exc
        return BrokerData(_str(d, "cluster", "brokerData", ""), _str(d, "brokerName", "brokerData"), parsed)


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    """The body of a GET_ROUTEINFO_BY_TOPIC answer."""

    queue_datas: Sequence[QueueData]
    broker_datas: Sequence[BrokerData]
    order_topic_conf: str | None = None


def encode_route(route: TopicRouteData) -> bytes:
    doc: dict[str, Any] = {
        "brokerDatas": [b.to_json() for b in route.broker_datas],
        "filterServerTable": {},
        "queueDatas": [q.to_json() for q in route.queue_datas],
    }
    if route.order_topic_conf is not None:
        doc["orderTopicConf"] = route.order_topic_conf
    return dumps(doc)


def decode_route(raw: bytes) -> TopicRouteData:
    doc = _object(loads_lenient(raw, "TopicRouteData"), "TopicRouteData")
    return TopicRouteData(
        queue_datas=[QueueData.from_json(q) for q in _list(doc, "queueDatas", "TopicRouteData")],
        broker_datas=[BrokerData.from_json(b) for b in _list(doc, "brokerDatas", "TopicRouteData")],
        order_topic_conf=doc.get("orderTopicConf"),
    )


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO: every broker name's replicas, and each cluster's broker names."""

    broker_addr_table: Mapping[str, BrokerData]
    cluster_addr_table: Mapping[str, Sequence[str]]


def encode_cluster_info(info: ClusterInfo) -> bytes:
    return dumps(
        {
            "brokerAddrTable": {name: b.to_json() for name, b in info.broker_addr_table.items()},
            "clusterAddrTable": {c: sorted(names) for c, names in info.cluster_addr_table.items()},
        }
    )


def decode_cluster_info(raw: bytes) -> ClusterInfo:
    doc = _object(loads_lenient(raw, "ClusterInfo"), "ClusterInfo")
    brokers = _object(doc.get("brokerAddrTable") or {}, "ClusterInfo.brokerAddrTable")
    clusters = _object(doc.get("clusterAddrTable") or {}, "ClusterInfo.clusterAddrTable")
    return ClusterInfo(
        {name: BrokerData.from_json(b) for name, b in brokers.items()},
        {name: [str(n) for n in members] for name, members in clusters.items()},
    )


# --- heartbeat -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    """One topic a consumer group subscribes to. ``sub_string`` is ``*`` or ``a || b``;
    ``code_set`` holds the Java hashCodes of ``tags_set`` (the ConsumeQueue tagsCodes)."""

    topic: str
    sub_string: str = "*"
    tags_set: tuple[str, ...] = ()
    code_set: tuple[int, ...] = ()
    sub_version: int = 0
    expression_type: str = "TAG"

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": False,
            "codeSet": list(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": list(self.tags_set),
            "topic": self.topic,
        }

    @staticmethod
    def from_json(doc: object) -> SubscriptionData:
        d = _object(doc, "subscriptionData")
        what = "subscriptionData"
        return SubscriptionData(
            topic=_str(d, "topic", what),
            sub_string=_str(d, "subString", what, "*") if d.get("subString") is not None else "*",
            tags_set=tuple(str(t) for t in _list(d, "tagsSet", what)),
            code_set=tuple(_as_int(c, f"{what}.codeSet") for c in _list(d, "codeSet", what)),
            sub_version=_int(d, "subVersion", what, 0),
            expression_type=_str(d, "expressionType", what, "TAG") if d.get("expressionType") else "TAG",
        )


@dataclass(frozen=True, slots=True)
class ConsumerData:
    """A consumer group of a client: ``consume_type`` CONSUME_PASSIVELY (push) / ACTIVELY (pull),
    ``message_model`` CLUSTERING / BROADCASTING, ``consume_from_where`` CONSUME_FROM_*."""

    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: tuple[SubscriptionData, ...] = ()
    unit_mode: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "consumeFromWhere": self.consume_from_where,
            "consumeType": self.consume_type,
            "groupName": self.group_name,
            "messageModel": self.message_model,
            "subscriptionDataSet": [s.to_json() for s in self.subscriptions],
            "unitMode": self.unit_mode,
        }

    @staticmethod
    def from_json(doc: object) -> ConsumerData:
        d = _object(doc, "consumerData")
        what = "consumerData"
        return ConsumerData(
            group_name=_str(d, "groupName", what),
            consume_type=str(d.get("consumeType") or "CONSUME_PASSIVELY"),
            message_model=str(d.get("messageModel") or "CLUSTERING"),
            consume_from_where=str(d.get("consumeFromWhere") or "CONSUME_FROM_LAST_OFFSET"),
            subscriptions=tuple(SubscriptionData.from_json(s) for s in _list(d, "subscriptionDataSet", what)),
            unit_mode=d.get("unitMode") is True,
        )


@dataclass(frozen=True, slots=True)
class HeartbeatData:
    """The HEART_BEAT body: a client id and the producer and consumer groups it runs."""

    client_id: str
    producer_groups: tuple[str, ...] = ()
    consumers: tuple[ConsumerData, ...] = ()


def encode_heartbeat(hb: HeartbeatData) -> bytes:
    return dumps(
        {
            "clientID": hb.client_id,
            "consumerDataSet": [c.to_json() for c in hb.consumers],
            "producerDataSet": [{"groupName": g} for g in hb.producer_groups],
        }
    )


def decode_heartbeat(raw: bytes) -> HeartbeatData:
    """Parse a HEART_BEAT body (Java's fastjson or ali-ons' ``JSON.stringify``)."""
    doc = _object(loads_lenient(raw, "HeartbeatData"), "HeartbeatData")
    producers = [_object(p, "producerData") for p in _list(doc, "producerDataSet", "HeartbeatData")]
    return HeartbeatData(
        client_id=_str(doc, "clientID", "HeartbeatData"),
        producer_groups=tuple(_str(p, "groupName", "producerData") for p in producers),
        consumers=tuple(ConsumerData.from_json(c) for c in _list(doc, "consumerDataSet", "HeartbeatData")),
    )


def _as_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BodyError(f"{what} must hold integers, got {value!r}")
    return value


# --- consumer list, queue locks, KV table ----------------------------------------------------------


def encode_consumer_list(client_ids: Sequence[str]) -> bytes:
    """GET_CONSUMER_LIST_BY_GROUP answer: ``{"consumerIdList":[...]}``."""
    return dumps({"consumerIdList": list(client_ids)})


def decode_consumer_list(raw: bytes) -> list[str]:
    doc = _object(loads_lenient(raw, "GetConsumerListByGroupResponseBody"), "consumer list")
    return [str(c) for c in _list(doc, "consumerIdList", "consumer list")]


@dataclass(frozen=True, slots=True, order=True)
class MessageQueueRef:
    """A ``MessageQueue`` in bodies: (topic, brokerName, queueId)."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @staticmethod
    def from_json(doc: object) -> MessageQueueRef:
        d = _object(doc, "messageQueue")
        return MessageQueueRef(
            _str(d, "topic", "messageQueue"),
            _str(d, "brokerName", "messageQueue"),
            _int(d, "queueId", "messageQueue"),
        )


@dataclass(frozen=True, slots=True)
class LockBatchRequest:
    """LOCK_BATCH_MQ / UNLOCK_BATCH_MQ body (``LockBatchRequestBody``/``UnlockBatchRequestBody``)."""

    consumer_group: str
    client_id: str
    mq_set: tuple[MessageQueueRef, ...] = ()
    only_this_broker: bool = False


def encode_lock_request(req: LockBatchRequest) -> bytes:
    return dumps(
        {
            "clientId": req.client_id,
            "consumerGroup": req.consumer_group,
            "mqSet": [mq.to_json() for mq in req.mq_set],
            "onlyThisBroker": req.only_this_broker,
        }
    )


def decode_lock_request(raw: bytes) -> LockBatchRequest:
    doc = _object(loads_lenient(raw, "LockBatchRequestBody"), "LockBatchRequestBody")
    what = "LockBatchRequestBody"
    return LockBatchRequest(
        consumer_group=_str(doc, "consumerGroup", what),
        client_id=_str(doc, "clientId", what),
        mq_set=tuple(MessageQueueRef.from_json(mq) for mq in _list(doc, "mqSet", what)),
        only_this_broker=doc.get("onlyThisBroker") is True,
    )


def encode_lock_response(locked: Sequence[MessageQueueRef]) -> bytes:
    """LOCK_BATCH_MQ answer (``LockBatchResponseBody``): the queues now locked by the caller."""
    return dumps({"lockOKMQSet": [mq.to_json() for mq in sorted(locked)]})


def decode_lock_response(raw: bytes) -> list[MessageQueueRef]:
    doc = _object(loads_lenient(raw, "LockBatchResponseBody"), "LockBatchResponseBody")
    return [MessageQueueRef.from_json(mq) for mq in _list(doc, "lockOKMQSet", "LockBatchResponseBody")]


def encode_kv_table(table: Mapping[str, str]) -> bytes:
    """``KVTable``: ``{"table":{...}}`` (GET_KVLIST_BY_NAMESPACE, broker runtime info)."""
    return dumps({"table": dict(table)})


def decode_kv_table(raw: bytes) -> dict[str, str]:
    doc = _object(loads_lenient(raw, "KVTable"), "KVTable")
    return {str(k): str(v) for k, v in _object(doc.get("table") or {}, "KVTable.table").items()}
