"""The security model: users, credentials, rights and the one authorization function.

* :mod:`~broker.security.scram` / :mod:`~broker.security.scram_format`: SCRAM-SHA-256/512
  exchanges (server and client) and Kafka's stored credential format.
* :mod:`~broker.security.plain`: SASL PLAIN, verified against the stored SCRAM credential.
* :mod:`~broker.security.users` / :mod:`~broker.security.users_file`: the users file (tokens
  hashed, SCRAM keys, rights, superusers, brokers), atomic writes, reloads.
* :mod:`~broker.security.acl`: :func:`authorize` and Kafka's per-API table.
* :mod:`~broker.security.secret_file`: the broker's stable secret for unknown users' mock salts.
* :mod:`~broker.security.certs`: a throw-away CA and leaf certificates (needs ``cryptography``).

Pure and I/O-free except the users file; the doors (HTTP, Kafka) call into it. See
docs/security.md.
"""

from broker.security.acl import (
    CLUSTER_NAME,
    KAFKA_API_RULES,
    ApiRule,
    Check,
    Grant,
    Operation,
    Permission,
    Principal,
    PrincipalKind,
    Resource,
    ResourceType,
    authorize,
    authorize_any,
    cluster,
)
from broker.security.errors import (
    GENERIC_FAILURE,
    AuthenticationFailed,
    IllegalSaslState,
    InvalidUsersFile,
    MalformedSaslMessage,
    SecurityError,
)
from broker.security.plain import authenticate_plain, format_plain, parse_plain
from broker.security.scram import CredentialLookup, ScramClient, ScramServer, ScramState
from broker.security.scram_format import ScramCredential, ScramMechanism, make_credential
from broker.security.secret_file import load_or_create_secret
from broker.security.users import (
    AccessKey,
    User,
    UserTable,
    hash_token,
    new_access_key,
    new_token,
    parse_users,
    shorthand_grants,
)
from broker.security.users_file import ReloadOutcome, ReloadResult, UsersFile, load_users, write_users

__all__ = [
    "CLUSTER_NAME", "GENERIC_FAILURE", "KAFKA_API_RULES", "AccessKey", "ApiRule",
    "AuthenticationFailed", "Check", "CredentialLookup", "Grant", "IllegalSaslState",
    "InvalidUsersFile", "MalformedSaslMessage", "Operation", "Permission", "Principal",
    "PrincipalKind", "ReloadOutcome", "ReloadResult", "Resource", "ResourceType", "ScramClient",
    "ScramCredential", "ScramMechanism", "ScramServer", "ScramState", "SecurityError", "User",
    "UserTable", "UsersFile", "authenticate_plain", "authorize", "authorize_any", "cluster",
    "format_plain", "hash_token", "load_or_create_secret", "load_users", "make_credential",
    "new_access_key", "new_token", "parse_plain", "parse_users", "shorthand_grants", "write_users",
]  # fmt: skip
