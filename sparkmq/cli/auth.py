"""``sparkmq auth add-user|init``: write the users file and a throw-away CA (offline tools).

Secrets never come from argv (they would sit in ``ps`` and shell history): a password is read
from standard input (``--password-stdin``, first line), and a generated token or password is
printed once on standard output, alone on its line, so a script can capture it; everything
else goes to standard error. The users file is written atomically with mode 0600
(docs/security.md).
"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path
from typing import Annotated

import typer

from broker.security import (
    AccessKey,
    InvalidUsersFile,
    ScramMechanism,
    User,
    UserTable,
    hash_token,
    load_users,
    make_credential,
    new_access_key,
    new_token,
    write_users,
)
from broker.security.certs import issue_cert, make_ca, write_private
from broker.security.scram_format import DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS
from broker.security.users import check_name
from sparkmq.cli.common import Exit, fail
from sparkmq.cli.root import auth_app

#: The broker identity ``auth init`` writes (a ``broker`` user; its credential in broker.credential).
BROKER_USER = "broker"

UsersFileOption = Annotated[
    Path, typer.Option("--file", help="The users file (as given to serve --auth-file).")
]
Globs = Annotated[list[str] | None, typer.Option(help="A topic glob (repeat for several).")]


def read_password(from_stdin: bool) -> str | None:
    if not from_stdin:
        return None
    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        fail("--password-stdin: standard input has no password on its first line", Exit.USAGE)
    return password


def build_user(
    name: str,
    password: str | None,
    token: str | None,
    *,
    produce: list[str] | None = None,
    consume: list[str] | None = None,
    admin: list[str] | None = None,
    superuser: bool = False,
    broker: bool = False,
    iterations: int = DEFAULT_ITERATIONS,
    access_key: AccessKey | None = None,
) -> User:
    """A user with SCRAM-SHA-256 and -512 credentials for ``password``, the hash of ``token``
    and the RocketMQ ``access_key`` pair."""
    scram = {}
    if password is not None:
        scram = {m: make_credential(m, password, iterations=iterations) for m in ScramMechanism}
    return User(
        name=name,
        token_hashes=(hash_token(token),) if token else (),
        scram=scram,
        access_keys=(access_key,) if access_key else (),
        produce=tuple(produce or ()),
        consume=tuple(consume or ()),
        admin=tuple(admin or ()),
        superuser=superuser,
        broker=broker,
    )


def _load_or_empty(path: Path) -> UserTable:
    if not path.exists():
        return UserTable()
    try:
        return load_users(path)
    except InvalidUsersFile as exc:
        fail(f"refusing to rewrite an invalid users file: {exc}", Exit.ERROR)


@auth_app.command("add-user")
def add_user(
    name: Annotated[str, typer.Argument(help="The user name (Kafka SASL user, HTTP principal).")],
    file: UsersFileOption,
    password_stdin: Annotated[bool, typer.Option(help="Read a SASL password from stdin.")] = False,
    token: Annotated[bool, typer.Option(help="Generate a bearer token (printed once).")] = False,
    access_key: Annotated[
        bool,
        typer.Option(help="Generate a RocketMQ access key and secret key (printed once, two lines)."),
    ] = False,
    produce: Globs = None,
    consume: Globs = None,
    admin: Globs = None,
    superuser: Annotated[bool, typer.Option(help="Allowed everything but internal routes.")] = False,
    broker: Annotated[bool, typer.Option(help="A broker identity, for broker-to-broker calls.")] = False,
    replace: Annotated[bool, typer.Option(help="Replace a user of the same name.")] = False,
    iterations: Annotated[
        int, typer.Option(min=MIN_ITERATIONS, max=MAX_ITERATIONS, help="SCRAM PBKDF2 iterations.")
    ] = DEFAULT_ITERATIONS,
) -> None:
    """Add a user (or replace one with --replace) to the users file, creating it if needed."""
    try:
        check_name(name, "user")
    except InvalidUsersFile as exc:
        fail(str(exc), Exit.USAGE)
    if not (password_stdin or token or access_key):
        fail(
            "give --password-stdin (a SASL password), --token (a bearer token) and/or"
            " --access-key (RocketMQ clients)",
            Exit.USAGE,
        )
    table = _load_or_empty(file)
    if table.user(name) is not None and not replace:
        fail(f"user {name!r} exists in {file} (use --replace to overwrite it)", Exit.USAGE)
    password = read_password(password_stdin)
    bearer = new_token() if token else None
    pair = new_access_key() if access_key else None
    user = build_user(
        name, password, bearer, produce=produce, consume=consume, admin=admin,
        superuser=superuser, broker=broker, iterations=iterations, access_key=pair,
    )  # fmt: skip
    write_users(file, table.with_user(user))
    typer.echo(f"{'replaced' if table.user(name) else 'added'} user {name!r} in {file}", err=True)
    if bearer is not None:
        typer.echo("bearer token (shown once, store it now):", err=True)
        typer.echo(bearer)
    if pair is not None:
        typer.echo("RocketMQ access key, then secret key (shown once, store them now):", err=True)
        typer.echo(pair.access_key)
        typer.echo(pair.secret_key)


@auth_app.command("init")
def init(
    directory: Annotated[Path, typer.Argument(help="A new or empty folder for the files.")],
    host: Annotated[
        list[str] | None, typer.Option(help="Another name or address for the broker certificate.")
    ] = None,
    user: Annotated[str, typer.Option(help="The first superuser's name.")] = "admin",
    password_stdin: Annotated[bool, typer.Option(help="Read the superuser's password from stdin.")] = False,
    valid_days: Annotated[int, typer.Option(min=1, help="Certificate lifetime.")] = 365,
) -> None:
    """Write a throw-away CA, a broker certificate (127.0.0.1, localhost, --host), a users file
    with a first superuser and a broker identity, and that identity's credential file (for
    ``serve --peer-credential-file``: the broker's own calls and its operator job) into
    DIRECTORY. Not for production: use your own CA there."""
    names = {"ca": "ca.pem", "ca_key": "ca-key.pem", "cert": "broker.pem", "key": "broker-key.pem"}
    names |= {"users": "users.json", "credential": "broker.credential"}
    paths = {k: directory / v for k, v in names.items()}
    if user == BROKER_USER:
        fail(f"--user {BROKER_USER!r} is the broker identity's name: choose another", Exit.USAGE)
    existing = sorted(p.name for p in paths.values() if p.exists())
    if existing:
        fail(f"{directory} already holds {existing}: refusing to overwrite", Exit.USAGE)
    password = read_password(password_stdin)
    generated = password is None
    password = password or secrets.token_urlsafe(18)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca = make_ca(valid_days=valid_days)
    ca.write(paths["ca"], paths["ca_key"])
    hosts = ["127.0.0.1", "localhost", *(host or [])]
    issue_cert(ca, "sparkmq-broker", hosts, valid_days=valid_days).write(paths["cert"], paths["key"])
    broker_token = new_token()
    users = (
        build_user(user, password, None, superuser=True),
        build_user(BROKER_USER, None, broker_token, broker=True),
    )
    write_users(paths["users"], UserTable(users))
    write_private(paths["credential"], f"{BROKER_USER}:{broker_token}\n".encode())
    for key in ("ca", "ca_key", "cert", "key", "users", "credential"):
        typer.echo(f"wrote {paths[key]}", err=True)
    typer.echo(f"superuser {user!r} (SCRAM-SHA-256/512, PLAIN, HTTP Basic)", err=True)
    if generated:
        typer.echo("its password (shown once, store it now):", err=True)
        typer.echo(password)
