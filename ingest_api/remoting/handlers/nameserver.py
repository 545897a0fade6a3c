"""The name-server codes on the broker's own port: GET_ROUTEINFO_BY_TOPIC, GET_BROKER_CLUSTER_INFO.

A lone broker answers with itself as ``brokerId 0`` of its broker name; every queue of the
topic is readable and writable. A cluster member answers from the routes in ZooKeeper
(:func:`broker.broker_routes.topic_broker_routes`): each broker name holding queues of the
topic with as many queues as it holds (its ``i``-th queue id is the client's queue ``i``), its
master as ``brokerId 0`` and its slaves as ``1..n`` at their registered remoting addresses;
a broker name without a live master is read-only (``perm`` 4) until a slave is elected, and the
next route lookup shows the new master. An unknown topic is created when the store auto-creates topics
(as a producer's first write would; ali-ons gives up on TOPIC_NOT_EXIST instead of falling
back to ``TBW102`` like the Java client) and answered TOPIC_NOT_EXIST otherwise. A group's
retry topic (``%RETRY%group``) is created with the group's retry queue count
(:func:`broker.sendbacks.ensure_retry_topic`, as RocketMQ does at a consumer's heartbeat), so
push consumers subscribe to it from the start; a dead-letter topic (``%DLQ%group``) has a
route once the ladder has created it.
"""

from __future__ import annotations

from broker.broker_routes import BrokerRoute, topic_broker_routes
from broker.errors import BrokerError
from broker.sendbacks import ensure_retry_topic
from ingest_api.remoting.bodies import (
    BrokerData,
    ClusterInfo,
    QueueData,
    TopicRouteData,
    encode_cluster_info,
    encode_route,
)
from ingest_api.remoting.codec import RemotingCommand, response_to
from ingest_api.remoting.codes import AUTO_CREATE_TOPIC_KEY, MASTER_ID, PERM_READ, PERM_WRITE, ResponseCode
from ingest_api.remoting.connection import Connection
from ingest_api.remoting.handlers.context import DoorContext
from ingest_api.remoting.headers import GetRouteInfoRequest
from store import DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX, SparkMQError

#: RocketMQ's remark for a topic without a route (clients log it).
NO_ROUTE_REMARK = "No topic route info in name server for the topic: "


def _broker_data(ctx: DoorContext) -> BrokerData:
    ident = ctx.identity
    return BrokerData(ident.cluster_name, ident.broker_name, {MASTER_ID: ident.address})


def creates_topic(ctx: DoorContext, topic: str) -> bool:
    """Whether a route lookup of ``topic`` would create it (a plain topic missing on a lone
    broker): the ACL guard then asks :func:`broker.auth.may_create_topic` first."""
    special = topic == AUTO_CREATE_TOPIC_KEY or topic.startswith((RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX))
    return ctx.broker.cluster is None and not special and not ctx.store.has_topic(topic)


async def _queue_count(ctx: DoorContext, topic: str) -> int | None:
    store = ctx.store
    if store.has_topic(topic):
        return store.queue_count(topic)
    if topic == AUTO_CREATE_TOPIC_KEY:
        return store.config.default_queues_per_topic if store.config.auto_create_topics else None
    if topic.startswith(RETRY_TOPIC_PREFIX):
        try:
            return await ctx.run_blocking(ensure_retry_topic, ctx.broker, topic[len(RETRY_TOPIC_PREFIX) :])
        except (SparkMQError, BrokerError):
            return None  # not a group name the store takes, or no group settings
    if topic.startswith(DLQ_TOPIC_PREFIX):
        return None
    try:
        return await ctx.run_blocking(store.ensure_topic, topic)
    except SparkMQError:
        return None  # auto-create off, or a name the store refuses


def _member_addresses(route: BrokerRoute) -> dict[int, str]:
    """brokerId -> remoting address: the master 0, the slaves 1..n (members without a
    registered remoting address are left out)."""
    addresses = {}
    if route.master is not None and route.master.remoting is not None:
        addresses[MASTER_ID] = route.master.remoting
    for slave_id, slave in enumerate(route.slaves, start=1):
        if slave.remoting is not None:
            addresses[slave_id] = slave.remoting
    return addresses


def _cluster_route(ctx: DoorContext, routes: list[BrokerRoute]) -> TopicRouteData:
    cluster = ctx.identity.cluster_name
    return TopicRouteData(
        queue_datas=[QueueData(r.broker_name, len(r.queue_ids), len(r.queue_ids), _perm(r)) for r in routes],
        broker_datas=[BrokerData(cluster, r.broker_name, _member_addresses(r)) for r in routes],
    )


def _perm(route: BrokerRoute) -> int:
    return PERM_READ | PERM_WRITE if route.master is not None else PERM_READ


async def get_route_info(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    header = GetRouteInfoRequest.from_ext_fields(cmd.ext_fields)
    if ctx.broker.cluster is not None:
        try:
            routes = await topic_broker_routes(ctx.broker, header.topic)
        except SparkMQError:
            routes = None
        if not routes:
            return response_to(cmd, ResponseCode.TOPIC_NOT_EXIST, NO_ROUTE_REMARK + header.topic)
        return response_to(cmd, ResponseCode.SUCCESS, body=encode_route(_cluster_route(ctx, routes)))
    queues = await _queue_count(ctx, header.topic)
    if queues is None:
        return response_to(cmd, ResponseCode.TOPIC_NOT_EXIST, NO_ROUTE_REMARK + header.topic)
    route = TopicRouteData(
        queue_datas=[QueueData(ctx.identity.broker_name, queues, queues, PERM_READ | PERM_WRITE)],
        broker_datas=[_broker_data(ctx)],
    )
    return response_to(cmd, ResponseCode.SUCCESS, body=encode_route(route))


async def get_broker_cluster_info(
    ctx: DoorContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    node = ctx.broker.cluster
    if node is not None:
        cluster = ctx.identity.cluster_name
        datas = {}
        for name, group in sorted(node.view.groups.items()):
            master = group.master
            slaves = tuple(sorted((m for m in group.members if m is not master), key=lambda m: m.member_id))
            datas[name] = BrokerData(cluster, name, _member_addresses(BrokerRoute(name, (), master, slaves)))
        info = ClusterInfo(datas, {cluster: list(datas)})
        return response_to(cmd, ResponseCode.SUCCESS, body=encode_cluster_info(info))
    broker = _broker_data(ctx)
    info = ClusterInfo({broker.broker_name: broker}, {broker.cluster: [broker.broker_name]})
    return response_to(cmd, ResponseCode.SUCCESS, body=encode_cluster_info(info))
