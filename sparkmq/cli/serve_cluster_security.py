"""The cluster-side security flags of ``sparkmq serve`` (docs/security.md, "Cluster").

* ``--peer-credential NAME:SECRET`` or ``--peer-credential-file FILE`` (or
  ``SPARKMQ_PEER_CREDENTIAL``): this broker's identity in calls to the other brokers, a
  ``broker`` user of ``--auth-file`` and one of its tokens;
* ``--peer-tls-ca FILE``: the CA of the other brokers' HTTPS listeners (default: ``--tls-ca``);
* ``--zk-auth-file FILE``, or ``SPARKMQ_ZK_AUTH`` (``USER:PASSWORD``): ZooKeeper's digest
  identity (instead of ``zk://user:pw@...``);
* ``--ha-tls-cert/--ha-tls-key/--ha-tls-ca``: mutual TLS on the replication port.

Only this module turns them into configuration; secrets are read from files or the environment
rather than argv where possible, and no message quotes one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from broker.peer_identity import PeerCredential, load_peer_credential, parse_peer_credential
from cluster import ClusterConfig, InvalidClusterAddress
from cluster.address import ZkDigest, parse_digest
from store import InvalidArgument
from store.ha import HATls

_PANEL = "Cluster security"

PeerCredentialOption = Annotated[
    str | None,
    typer.Option(
        envvar="SPARKMQ_PEER_CREDENTIAL",
        help='NAME:SECRET of this broker\'s user ("broker": true in --auth-file) for calls to other '
        "brokers; prefer --peer-credential-file or the variable (argv is visible in ps).",
        rich_help_panel=_PANEL,
    ),
]
PeerCredentialFileOption = Annotated[
    Path | None, typer.Option(help="A file holding NAME:SECRET (mode 0600).", rich_help_panel=_PANEL)
]
PeerTlsCaOption = Annotated[
    Path | None,
    typer.Option(
        help="CA of the other brokers' HTTPS listeners (default: --tls-ca, the cluster CA).",
        rich_help_panel=_PANEL,
    ),
]
ZkAuthFileOption = Annotated[
    Path | None,
    typer.Option(
        help="A file holding USER:PASSWORD: ZooKeeper digest identity; every node gets an ACL for it.",
        rich_help_panel=_PANEL,
    ),
]
ZkAuthEnvOption = Annotated[
    str | None,
    typer.Option(
        "--zk-auth",
        envvar="SPARKMQ_ZK_AUTH",
        help="USER:PASSWORD for ZooKeeper (from SPARKMQ_ZK_AUTH; argv is visible in ps).",
        rich_help_panel=_PANEL,
    ),
]
HaTlsCertOption = Annotated[
    Path | None,
    typer.Option(help="This member's certificate for mutual TLS on --ha-port.", rich_help_panel=_PANEL),
]
HaTlsKeyOption = Annotated[Path | None, typer.Option(help="Its private key.", rich_help_panel=_PANEL)]
HaTlsCaOption = Annotated[
    Path | None, typer.Option(help="The cluster CA that signs every member's.", rich_help_panel=_PANEL)
]


@dataclass(frozen=True)
class ClusterSecurityFlags:
    peer_credential: str | None = None
    peer_credential_file: Path | None = None
    peer_tls_ca: Path | None = None
    zk_auth_file: Path | None = None
    ha_tls_cert: Path | None = None
    ha_tls_key: Path | None = None
    ha_tls_ca: Path | None = None
    zk_auth: str | None = None

    def credential(self) -> PeerCredential | None:
        """The peer credential the flags give; :class:`InvalidArgument` when both are given or
        it is malformed."""
        if self.peer_credential is not None and self.peer_credential_file is not None:
            raise InvalidArgument("give --peer-credential or --peer-credential-file, not both")
        if self.peer_credential_file is not None:
            return load_peer_credential(self.peer_credential_file)
        if self.peer_credential is not None:
            return parse_peer_credential(self.peer_credential)
        return None

    def membership(self, membership: ClusterConfig | None) -> ClusterConfig | None:
        """``membership`` with the ZooKeeper identity and the HA TLS files applied."""
        ha_files = (self.ha_tls_cert, self.ha_tls_key, self.ha_tls_ca)
        given = [f for f in (self.zk_auth_file, self.zk_auth, *ha_files) if f is not None]
        if membership is None:
            if given:
                raise InvalidArgument("--zk-auth(-file) and --ha-tls-* need --cluster")
            return None
        changes: dict[str, object] = {}
        digest = self._digest()
        if digest is not None:
            if membership.address.digest is not None:
                raise InvalidArgument(
                    "ZooKeeper credential: --cluster user:pw@ or --zk-auth(-file), not both"
                )
            changes["address"] = membership.address.with_digest(digest)
        if any(f is not None for f in ha_files):
            cert, key, ca = ha_files
            if cert is None or key is None or ca is None:
                raise InvalidArgument("--ha-tls-cert, --ha-tls-key and --ha-tls-ca go together")
            changes["ha_tls"] = HATls(cert, key, ca)
        return membership.with_changes(**changes) if changes else membership

    def _digest(self) -> ZkDigest | None:
        if self.zk_auth is not None and self.zk_auth_file is not None:
            raise InvalidArgument("give --zk-auth (SPARKMQ_ZK_AUTH) or --zk-auth-file, not both")
        if self.zk_auth_file is not None:
            return _read_digest(self.zk_auth_file)
        if self.zk_auth is None:
            return None
        try:
            return parse_digest(self.zk_auth, "SPARKMQ_ZK_AUTH")
        except InvalidClusterAddress as exc:
            raise InvalidArgument(str(exc)) from None


def _read_digest(path: Path) -> ZkDigest:
    try:
        first = path.read_text(encoding="utf-8").splitlines()[:1]
    except OSError as exc:
        raise InvalidArgument(f"cannot read --zk-auth-file {path}: {exc.strerror}") from None
    try:
        return parse_digest(first[0] if first else "", f"--zk-auth-file {path}")
    except InvalidClusterAddress as exc:
        raise InvalidArgument(str(exc)) from None
