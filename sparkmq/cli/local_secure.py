"""``sparkmq cluster local --secure DIR``: the files a secured local cluster runs with.

Written once into ``DIR`` (0700; keys, secrets and the users file 0600), reused on later runs,
and completed for members added since::

    ca.pem, ca-key.pem          a throw-away CA (for trying sparkmq, not for production)
    <member>.pem, -key.pem      each member's replication certificate (common name = member)
    users.json                  superuser "admin" and one broker user per member
    <member>.peer               the member's NAME:SECRET peer credential
    zk-auth                     the ZooKeeper digest identity, USER:PASSWORD
    admin.token                 the admin's bearer token (printed once when created)

See docs/security.md, "Quick start: a secured make cluster".
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from broker.security import User, UserTable, hash_token, load_users, new_token, write_users
from broker.security.certs import CertificateAndKey, issue_cert, make_ca, write_private

HOSTS = ("127.0.0.1", "localhost")
ZK_USER = "sparkmq"


@dataclass(frozen=True)
class SecureFiles:
    root: Path

    @property
    def ca(self) -> Path:
        return self.root / "ca.pem"

    @property
    def users(self) -> Path:
        return self.root / "users.json"

    @property
    def zk_auth(self) -> Path:
        return self.root / "zk-auth"

    @property
    def admin_token(self) -> Path:
        return self.root / "admin.token"

    def cert(self, member: str) -> tuple[Path, Path]:
        return self.root / f"{member}.pem", self.root / f"{member}-key.pem"

    def peer(self, member: str) -> Path:
        return self.root / f"{member}.peer"

    def serve_args(self, member: str, replicated: bool) -> list[str]:
        """The ``sparkmq serve`` flags of ``member``."""
        args = ["--auth-file", str(self.users), "--peer-credential-file", str(self.peer(member))]
        args += ["--zk-auth-file", str(self.zk_auth)]
        if replicated:
            cert, key = self.cert(member)
            args += ["--ha-tls-cert", str(cert), "--ha-tls-key", str(key), "--ha-tls-ca", str(self.ca)]
        return args


def prepare(root: Path, members: Sequence[str]) -> tuple[SecureFiles, str | None]:
    """Create what is missing under ``root``; returns the files and the admin token when it was
    created now (to print once), else ``None``."""
    files = SecureFiles(root)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca = _ca(files)
    users = load_users(files.users) if files.users.exists() else UserTable()
    created_token = None
    if users.user("admin") is None:
        created_token = new_token()
        users = users.with_user(User("admin", token_hashes=(hash_token(created_token),), superuser=True))
        write_private(files.admin_token, created_token.encode() + b"\n")
    for member in members:
        cert, key = files.cert(member)
        if not cert.exists():
            issue_cert(ca, member, HOSTS).write(cert, key)
        name = f"broker-{member}"
        if users.user(name) is None or not files.peer(member).exists():
            secret = new_token()
            users = users.with_user(User(name, token_hashes=(hash_token(secret),), broker=True))
            files.peer(member).unlink(missing_ok=True)
            write_private(files.peer(member), f"{name}:{secret}\n".encode())
    write_users(files.users, users)
    if not files.zk_auth.exists():
        write_private(files.zk_auth, f"{ZK_USER}:{secrets.token_urlsafe(24)}\n".encode())
    return files, created_token


def _ca(files: SecureFiles) -> CertificateAndKey:
    key_path = files.root / "ca-key.pem"
    if files.ca.exists() and key_path.exists():
        return CertificateAndKey(files.ca.read_bytes(), key_path.read_bytes())
    ca = make_ca("sparkmq local cluster CA")
    for path in (files.ca, key_path):
        if path.exists():
            os.unlink(path)
    ca.write(files.ca, key_path)
    return ca
