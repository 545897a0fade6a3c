"""THE authorization function: :func:`authorize` ``(principal, operation, resource) -> bool``.

Every door asks this one function; no door keeps a rule of its own. The semantics are
Kafka's (``StandardAuthorizer``, docs §7.5), over the rights of the users file:

* A right (:class:`Grant`) names a resource type, a glob on the resource name (``*`` is
  every name, ``orders-*`` a prefix), operations, and ``allow`` or ``deny``.
* **DENY beats ALLOW.** No matching ALLOW means deny.
* An ALLOW of READ, WRITE, DELETE or ALTER implies DESCRIBE; ALTER_CONFIGS implies
  DESCRIBE_CONFIGS; ALL is every operation. A DENY matches only its own operation or ALL.
* A **superuser** may do everything except CLUSTER_ACTION.
* CLUSTER_ACTION (internal, broker-to-broker routes) is for **broker** principals only, never
  a user's, not even a superuser's. A broker acting on its own may do everything.
* A **forwarded** request (a broker principal carrying ``on_behalf_of``) is judged on the
  user it carries: the data rights are the user's, wherever the request entered.
  ``on_behalf_of`` on a non-broker principal is ignored (doors must not set it; this is the
  second line).
* ``None`` (auth off) is allowed everything.

:data:`KAFKA_API_RULES` is Kafka's table (``KafkaApis``) of what each API key needs, as data
for the Kafka door and for a test that every advertised key has an entry.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

#: The name of the one cluster resource (Kafka's ``kafka-cluster``).
CLUSTER_NAME = "kafka-cluster"


class Operation(enum.Enum):
    """Kafka's ACL operations (``AclOperation``), by their names in the users file."""

    READ = "read"
    WRITE = "write"
    CREATE = "create"
    DELETE = "delete"
    ALTER = "alter"
    DESCRIBE = "describe"
    CLUSTER_ACTION = "cluster_action"
    DESCRIBE_CONFIGS = "describe_configs"
    ALTER_CONFIGS = "alter_configs"
    IDEMPOTENT_WRITE = "idempotent_write"
    ALL = "all"


class ResourceType(enum.Enum):
    TOPIC = "topic"
    GROUP = "group"
    TRANSACTIONAL_ID = "transactional_id"
    CLUSTER = "cluster"


class Permission(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"


#: An ALLOW of the key also allows these (``StandardAuthorizerData``).
IMPLIED_BY_ALLOW: dict[Operation, frozenset[Operation]] = {
    Operation.READ: frozenset({Operation.DESCRIBE}),
    Operation.WRITE: frozenset({Operation.DESCRIBE}),
    Operation.DELETE: frozenset({Operation.DESCRIBE}),
    Operation.ALTER: frozenset({Operation.DESCRIBE}),
    Operation.ALTER_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS}),
    Operation.ALL: frozenset(Operation),
}

Resource = tuple[ResourceType, str]


def cluster() -> Resource:
    return (ResourceType.CLUSTER, CLUSTER_NAME)


@dataclass(frozen=True, slots=True)
class Grant:
    """One right: ``permission`` of ``operations`` on ``resource_type`` names matching ``pattern``."""

    resource_type: ResourceType
    pattern: str
    operations: frozenset[Operation]
    permission: Permission = Permission.ALLOW

    def matches(self, operation: Operation, resource: Resource) -> bool:
        resource_type, name = resource
        if resource_type is not self.resource_type or not fnmatchcase(name, self.pattern):
            return False
        if operation in self.operations or Operation.ALL in self.operations:
            return True
        if self.permission is Permission.DENY:
            return False
        return any(operation in IMPLIED_BY_ALLOW.get(granted, ()) for granted in self.operations)


class PrincipalKind(enum.Enum):
    USER = "user"
    BROKER = "broker"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is asking: a user or a broker, with its rights (a snapshot of the users file).

    ``on_behalf_of`` is the user a broker forwards for; only a broker principal's counts.
    """

    name: str
    kind: PrincipalKind = PrincipalKind.USER
    superuser: bool = False
    grants: tuple[Grant, ...] = field(default=(), repr=False)
    on_behalf_of: Principal | None = None

    @property
    def is_broker(self) -> bool:
        return self.kind is PrincipalKind.BROKER

    def forwarding(self, user: Principal) -> Principal:
        """This broker principal carrying ``user``; raises ``ValueError`` for a non-broker."""
        if not self.is_broker:
            raise ValueError(f"only a broker principal may act on behalf of a user, not {self.name!r}")
        if user.on_behalf_of is not None or user.is_broker:
            raise ValueError("the forwarded principal must be a plain user")
        return Principal(self.name, self.kind, self.superuser, self.grants, on_behalf_of=user)

    @property
    def effective(self) -> Principal:
        """The principal whose rights decide data operations."""
        if self.is_broker and self.on_behalf_of is not None:
            return self.on_behalf_of
        return self

    def __str__(self) -> str:
        text = f"{self.kind.value.capitalize()}:{self.name}"
        if self.on_behalf_of is not None and self.is_broker:
            text += f" for {self.on_behalf_of}"
        return text


def authorize(principal: Principal | None, operation: Operation, resource: Resource) -> bool:
    """May ``principal`` perform ``operation`` on ``resource``? See the module docstring."""
    if principal is None:
        return True
    if operation is Operation.CLUSTER_ACTION:
        return principal.is_broker and resource[0] is ResourceType.CLUSTER
    if principal.is_broker and principal.on_behalf_of is None:
        return True
    acting = principal.effective
    if acting.superuser:
        return True
    allowed = False
    for grant in acting.grants:
        if grant.matches(operation, resource):
            if grant.permission is Permission.DENY:
                return False
            allowed = True
    return allowed


def authorize_any(principal: Principal | None, operation: Operation, resource_type: ResourceType) -> bool:
    """May ``principal`` perform ``operation`` on *some* resource of the type (KIP-679:
    idempotent InitProducerId needs WRITE on any topic)? Denies are not enumerable, so an
    ALLOW grant whose pattern is not fully denied counts."""
    if principal is None or (principal.is_broker and principal.on_behalf_of is None):
        return True
    acting = principal.effective
    if acting.superuser:
        return True
    return any(
        grant.permission is Permission.ALLOW
        and grant.resource_type is resource_type
        and grant.matches(operation, (resource_type, grant.pattern))
        and authorize(principal, operation, (resource_type, grant.pattern))
        for grant in acting.grants
    )


# --- Kafka: which API needs which operation on which resource --------------------------------


@dataclass(frozen=True, slots=True)
class Check:
    """One check an API makes; ``error_code`` is Kafka's answer when it fails."""

    operation: Operation
    resource_type: ResourceType
    error_code: int
    when: str = ""


@dataclass(frozen=True, slots=True)
class ApiRule:
    api_key: int
    name: str
    checks: tuple[Check, ...]
    on_denial: str


TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53
OPERATION_NOT_ATTEMPTED = 55

_T, _G, _C, _X = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID)
_R, _W, _D = Operation.READ, Operation.WRITE, Operation.DESCRIBE


def _rule(key: int, name: str, on_denial: str, *checks: Check) -> tuple[int, ApiRule]:
    return key, ApiRule(key, name, checks, on_denial)


#: Kafka's table (``KafkaApis.scala``; reference security.md §2) for every key this project
#: knows. An empty ``checks`` means the API is served without authorization.
KAFKA_API_RULES: dict[int, ApiRule] = dict(
    [
        _rule(0, "Produce", "29 per partition, before the existence check; txn id denied: 53",
              Check(_W, _T, TOPIC_DENIED), Check(_W, _X, TXN_DENIED, "transactional batches")),
        _rule(1, "Fetch", "29 per partition", Check(_R, _T, TOPIC_DENIED)),
        _rule(2, "ListOffsets", "29 per partition", Check(_D, _T, TOPIC_DENIED)),
        _rule(3, "Metadata", "all topics: unauthorized ones omitted; named: 29 without existence check",
              Check(_D, _T, TOPIC_DENIED),
              Check(Operation.CREATE, _C, TOPIC_DENIED, "auto-create, or CREATE on the topic")),
        _rule(8, "OffsetCommit", "30 for everything, else 29 per denied partition",
              Check(_R, _G, GROUP_DENIED), Check(_R, _T, TOPIC_DENIED)),
        _rule(9, "OffsetFetch", "30; partitions filtered (all) or 29",
              Check(_D, _G, GROUP_DENIED), Check(_D, _T, TOPIC_DENIED)),
        _rule(10, "FindCoordinator", "30 / 53",
              Check(_D, _G, GROUP_DENIED, "key type group"),
              Check(_D, _X, TXN_DENIED, "key type transaction")),
        _rule(11, "JoinGroup", "30", Check(_R, _G, GROUP_DENIED)),
        _rule(12, "Heartbeat", "30", Check(_R, _G, GROUP_DENIED)),
        _rule(13, "LeaveGroup", "30", Check(_R, _G, GROUP_DENIED)),
        _rule(14, "SyncGroup", "30", Check(_R, _G, GROUP_DENIED)),
        _rule(15, "DescribeGroups", "30 per group", Check(_D, _G, GROUP_DENIED)),
        _rule(16, "ListGroups", "DESCRIBE cluster lists all, else filtered per group; never an error",
              Check(_D, _C, 0), Check(_D, _G, 0, "filter")),
        _rule(17, "SaslHandshake", "none: served before authentication"),
        _rule(18, "ApiVersions", "none: served before authentication"),
        _rule(19, "CreateTopics", "29 per topic",
              Check(Operation.CREATE, _C, TOPIC_DENIED, "or CREATE on the topic")),
        _rule(20, "DeleteTopics", "29 per topic", Check(Operation.DELETE, _T, TOPIC_DENIED)),
        _rule(22, "InitProducerId", "53 / 31",
              Check(_W, _X, TXN_DENIED, "with a transactional id"),
              Check(Operation.IDEMPOTENT_WRITE, _C, CLUSTER_DENIED, "idempotent: or WRITE on any topic")),
        _rule(24, "AddPartitionsToTxn", "53; or 29 on denied partitions and 55 on the rest",
              Check(_W, _X, TXN_DENIED), Check(_W, _T, TOPIC_DENIED)),
        _rule(25, "AddOffsetsToTxn", "53 / 30", Check(_W, _X, TXN_DENIED), Check(_R, _G, GROUP_DENIED)),
        _rule(26, "EndTxn", "53", Check(_W, _X, TXN_DENIED)),
        _rule(28, "TxnOffsetCommit", "53 / 30 / 29 per partition",
              Check(_W, _X, TXN_DENIED), Check(_R, _G, GROUP_DENIED), Check(_R, _T, TOPIC_DENIED)),
        _rule(36, "SaslAuthenticate", "none: it is the authentication"),
        _rule(65, "DescribeTransactions", "53 per id", Check(_D, _X, TXN_DENIED)),
        _rule(66, "ListTransactions", "filtered per id", Check(_D, _X, 0, "filter")),
    ]
)  # fmt: skip
