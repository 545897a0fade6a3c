"""A store directory's identity in a cluster: ``config/cluster.json``.

A member id is allocated once per store directory (a ZooKeeper sequential node) and kept with
the data it names, so a broker restarted on the same disk comes back as the same member (the
same Kafka node id, RocketMQ's ``brokerId`` in the HA handshake), and a disk is never served
under another broker name or in another cluster by mistake::

    {"broker_name": "b1", "cluster": "/sparkmq", "member_id": 3}

The cluster is named by its chroot, not by its servers: a ZooKeeper ensemble may move or grow
without disowning the stores.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cluster.coordination import Coordination
from cluster.errors import StoreBelongsElsewhere
from store import read_json, write_json_atomically

IDENTITY_FILE = "cluster.json"
MEMBER_IDS_PATH = "/member_ids"
_SEQUENCE_PREFIX = "m-"


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    broker_name: str
    cluster: str
    member_id: int


def load_or_allocate(
    config_dir: Path, broker_name: str, cluster: str, coordination: Coordination
) -> MemberIdentity:
    """The identity recorded in ``config_dir``, or a new one allocated from ZooKeeper and
    recorded (atomically) before it is used. Raises :class:`StoreBelongsElsewhere` when the
    directory belongs to another broker name or cluster."""
    path = config_dir / IDENTITY_FILE
    recorded = read_json(path)
    if recorded is not None:
        identity = MemberIdentity(
            broker_name=str(recorded["broker_name"]),
            cluster=str(recorded["cluster"]),
            member_id=int(recorded["member_id"]),
        )
        if identity.broker_name != broker_name:
            raise StoreBelongsElsewhere(
                f"store directory {config_dir.parent} belongs to broker {identity.broker_name!r}, "
                f"not {broker_name!r} (start it with --broker-name {identity.broker_name}, "
                "or use another directory)"
            )
        if identity.cluster != cluster:
            raise StoreBelongsElsewhere(
                f"store directory {config_dir.parent} belongs to cluster {identity.cluster}, not {cluster}"
            )
        return identity
    created = coordination.create(f"{MEMBER_IDS_PATH}/{_SEQUENCE_PREFIX}", b"", sequential=True)
    member_id = int(created.rsplit(_SEQUENCE_PREFIX, 1)[1]) + 1  # ids start at 1 (Kafka node ids >= 0)
    identity = MemberIdentity(broker_name=broker_name, cluster=cluster, member_id=member_id)
    config_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomically(path, {"broker_name": broker_name, "cluster": cluster, "member_id": member_id})
    return identity
