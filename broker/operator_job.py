"""How ``sparkmq serve`` launches its operator job: the command line and the environment.

The job (:mod:`streaming.operators.runtime`, supervised by
:class:`broker.operators.OperatorSupervisor`) reaches its broker over HTTP like any client, so on
a secured broker it needs what a client needs:

* **the scheme**: ``https://HOST:PORT`` when the broker serves TLS (``--tls-cert``), else
  ``http://``; HOST is the bind address, ``127.0.0.1`` for a wildcard;
* **a CA** (``SPARKMQ_TLS_CA``): :attr:`broker.config.ServerConfig.peer_ca` (``--peer-tls-ca``,
  else ``--tls-ca``: the CA that signs the brokers' certificates), else the broker's own
  certificate file. The job trusts every certificate of that file as an anchor
  (:func:`streaming.http_access.ssl_context`), so a self-signed or leaf-only certificate pins
  the one broker the job talks to; host names are checked either way. Under
  ``--tls-require-client-cert`` the job presents the broker's own certificate (as peer calls
  do), named in argv (``--tls-client-cert/--tls-client-key``: paths, not secrets);
* **a credential** (``SPARKMQ_TOKEN``) with ``--auth-file``: the broker's own peer credential
  (``--peer-credential-file``): a broker principal acting on its own may do everything the job
  does (``GET /operators/settings``, ``POST .../batches/{b}``, ``PUT .../status`` and
  ``/replica/status``; it reads the system topics from the store directory, ``--path``). Without
  one, a token in the broker's own environment (``SPARKMQ_TOKEN``, what a job started by hand
  reads too) is passed on; without either, every call of the job would be refused (401), so
  :func:`job_launch` raises :class:`store.InvalidArgument` naming the options to give.

Secrets go in the environment, never in argv: argv shows in ``ps`` and in the supervisor's log
line. The variables above are always set or removed, never inherited from the broker's
environment by accident (an ``SPARKMQ_TLS_CA`` meant for the CLI does not reach the job).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from broker.config import ServerConfig
from store import InvalidArgument

#: The job's credential and CA (read by :func:`streaming.operators.runtime.parse_args`).
TOKEN_ENV = "SPARKMQ_TOKEN"
TLS_CA_ENV = "SPARKMQ_TLS_CA"
#: The job's lock file, in its checkpoint directory (:mod:`streaming.operators.tenure`).
LOCK_FILE = "job.lock"
_WILDCARDS = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class JobLaunch:
    """The job's command line, and the variables set on top of the broker's environment."""

    argv: tuple[str, ...]
    #: :data:`TOKEN_ENV` and :data:`TLS_CA_ENV` when they apply (secret: never in a repr).
    variables: Mapping[str, str] = field(default_factory=dict, repr=False)

    def environment(self, inherited: Mapping[str, str]) -> dict[str, str]:
        """``inherited`` without the job's own variables, then :attr:`variables`."""
        kept = {name: value for name, value in inherited.items() if name not in (TOKEN_ENV, TLS_CA_ENV)}
        return {**kept, **self.variables}


def job_argv(
    endpoint: str, store_dir: Path, checkpoint_dir: Path, master: str, extra: Sequence[str] = ()
) -> list[str]:
    """The command line of the local operator job (it holds ``<checkpoint_dir>/job.lock``)."""
    return [
        sys.executable, "-m", "streaming.operators", "--endpoint", endpoint, "--path", str(store_dir),
        "--checkpoint-dir", str(checkpoint_dir), "--lock-file", str(checkpoint_dir / LOCK_FILE),
        "--master", master, *extra,
    ]  # fmt: skip


def job_endpoint(config: ServerConfig) -> str:
    """The broker's own base URL as its job reaches it."""
    host = "127.0.0.1" if config.host in _WILDCARDS else config.host
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"{'https' if config.tls is not None else 'http'}://{host}:{config.port}"


def job_tls_ca(config: ServerConfig) -> Path | None:
    """The file the job verifies the broker's certificate with (``None``: plain HTTP)."""
    if config.tls is None:
        return None
    return (config.peer_ca or config.tls.cert_file).resolve()


def job_token(config: ServerConfig, inherited_token: str | None) -> str | None:
    """The job's bearer token (see the module docstring); ``None`` when auth is off.
    Raises :class:`InvalidArgument` when auth is on and there is none."""
    if config.auth_file is None:
        return None
    if config.peer_credential is not None:
        return config.peer_credential.secret
    if inherited_token:
        return inherited_token
    raise InvalidArgument(
        "the operator job (--operators local) needs a credential on a broker with --auth-file: give "
        "the broker its own identity with --peer-credential-file FILE (NAME:SECRET of a broker user: "
        "sparkmq auth add-user NAME --broker --token), or run the job yourself with --operators off "
        "(docs/security.md, 'The operator job')"
    )


def job_launch(
    config: ServerConfig,
    store_dir: Path,
    checkpoint_dir: Path,
    master: str,
    inherited_token: str | None = None,
    queries: Sequence[str] | None = None,
    grace_s: float = 0.0,
) -> JobLaunch:
    """What the supervisor runs for ``config``'s broker; ``inherited_token`` is the broker's own
    ``SPARKMQ_TOKEN``, if any; ``queries``: the resolvers to run (``None``: all); ``grace_s``:
    how long the job outlives its broker (0: it dies with it). Raises
    :class:`InvalidArgument` as :func:`job_token` does."""
    variables: dict[str, str] = {}
    token = job_token(config, inherited_token)
    if token is not None:
        variables[TOKEN_ENV] = token
    tls_ca = job_tls_ca(config)
    if tls_ca is not None:
        variables[TLS_CA_ENV] = str(tls_ca)
    extra: list[str] = []
    if config.tls is not None and config.tls.require_client_cert:
        extra += ["--tls-client-cert", str(config.tls.cert_file.resolve())]
        extra += ["--tls-client-key", str(config.tls.key_file.resolve())]
    if queries is not None:
        extra += ["--queries", ",".join(queries)]
    if grace_s > 0:
        extra += ["--broker-grace-s", f"{grace_s:g}"]
    argv = job_argv(job_endpoint(config), store_dir, checkpoint_dir, master, extra)
    return JobLaunch(tuple(argv), variables)
