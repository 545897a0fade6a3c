"""How ``sparkmq serve`` launches its operator job on a secured broker (no Spark): the command
line and environment it builds, the refusal without a credential, and the job's HTTP client
against a real HTTPS broker with auth, as the broker's own peer credential."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from broker.config import ServerConfig
from broker.operator_job import TLS_CA_ENV, TOKEN_ENV, job_launch
from broker.operators import OperatorSupervisor
from broker.peer_identity import PeerCredential
from broker.security import User, hash_token
from broker.tls import TlsConfig
from sparkmq.cli import app
from sparkmq.cli.serve import _duration_ms_or_zero, _grace_s
from store import InvalidArgument
from streaming.operators.client import BrokerClient
from streaming.operators.runtime import (
    MAX_QUERY_RESTARTS,
    POST_COLUMNS,
    SLOW_WORKER_RESTARTS,
    _restart_pause,
    parse_args,
    query_status,
)
from tests.support.secure_broker import TOKENS, SecureBroker, default_users, secure_broker
from tests.support.stores import light_config
from tests.support.tls import TestCA
from tests.support.waiting import wait_until

BROKER_SECRET = "broker-secret-plugh-6c1e0b5a77"
CREDENTIAL = PeerCredential("broker-1", BROKER_SECRET)
USERS = '{"tokens": [{"name": "ops", "token": "ops-token-1234", "admin": ["*"]}]}'


def _config(tmp_path: Path, **changes: object) -> ServerConfig:
    return ServerConfig(store=light_config(tmp_path / "store"), port=8443, **changes).validate()  # type: ignore[arg-type]


def _launch(
    config: ServerConfig, tmp_path: Path, inherited_token: str | None = None
) -> tuple[list[str], dict[str, str]]:
    launch = job_launch(config, tmp_path / "store", tmp_path / "ckpt", "local[1]", inherited_token)
    inherited = {"PATH": "/bin", TOKEN_ENV: "stale-token", TLS_CA_ENV: "/stale/ca.pem"}
    return list(launch.argv), launch.environment(inherited)


@pytest.fixture
def users_file(tmp_path: Path) -> Path:
    path = tmp_path / "users.json"
    path.write_text(USERS)
    return path


def test_a_plain_broker_gives_http_and_no_inherited_secret(tmp_path: Path) -> None:
    argv, env = _launch(_config(tmp_path, host="0.0.0.0"), tmp_path)
    assert argv[argv.index("--endpoint") + 1] == "http://127.0.0.1:8443"
    assert argv[:3] == [sys.executable, "-m", "streaming.operators"]
    assert env == {"PATH": "/bin"}, "the broker's own SPARKMQ_TOKEN/SPARKMQ_TLS_CA never reach the job"


def test_a_secured_broker_gives_https_its_ca_and_its_credential_in_the_environment(
    tmp_path: Path, users_file: Path
) -> None:
    ca = TestCA(tmp_path / "tls")
    leaf = ca.issue("broker")
    config = _config(
        tmp_path,
        auth_file=users_file,
        tls=TlsConfig(leaf.cert, leaf.key, ca.ca_file),
        peer_credential=CREDENTIAL,
    )
    launch = job_launch(config, tmp_path / "store", tmp_path / "ckpt", "local[1]")
    argv, env = list(launch.argv), launch.environment({"PATH": "/bin"})
    assert argv[argv.index("--endpoint") + 1] == "https://127.0.0.1:8443"
    assert env == {"PATH": "/bin", TOKEN_ENV: BROKER_SECRET, TLS_CA_ENV: str(ca.ca_file.resolve())}
    assert BROKER_SECRET not in " ".join(argv) and BROKER_SECRET not in repr(launch)
    # and the job reads them (the flags stay off its command line)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        job = parse_args(argv[3:])
    assert (job.endpoint, job.auth_token, job.tls_ca) == (
        "https://127.0.0.1:8443",
        BROKER_SECRET,
        env[TLS_CA_ENV],
    )
    assert BROKER_SECRET not in repr(job)


def test_without_tls_ca_the_job_pins_the_brokers_certificate(tmp_path: Path) -> None:
    leaf = TestCA(tmp_path / "tls").issue("broker")
    _, env = _launch(_config(tmp_path, tls=TlsConfig(leaf.cert, leaf.key)), tmp_path)
    assert env[TLS_CA_ENV] == str(leaf.cert.resolve()) and TOKEN_ENV not in env
    peer_ca = TestCA(tmp_path / "peers", "peers").ca_file
    _, env = _launch(_config(tmp_path, tls=TlsConfig(leaf.cert, leaf.key), peer_tls_ca=peer_ca), tmp_path)
    assert env[TLS_CA_ENV] == str(peer_ca.resolve()), "--peer-tls-ca first: the CA of the brokers"


def test_auth_without_a_broker_credential(tmp_path: Path, users_file: Path) -> None:
    config = _config(tmp_path, auth_file=users_file)
    _, env = _launch(config, tmp_path, inherited_token="ops-token-1234")
    assert env[TOKEN_ENV] == "ops-token-1234", "the broker's own SPARKMQ_TOKEN is passed on"
    with pytest.raises(InvalidArgument, match="--peer-credential-file"):
        job_launch(config, tmp_path / "store", tmp_path / "ckpt", "local[1]")


def test_serve_refuses_the_job_on_a_secured_broker_without_a_credential(
    tmp_path: Path, users_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    argv = ["serve", "--store-dir", str(tmp_path / "data"), "--port", "0", "--auth-file", str(users_file)]
    argv += ["--checkpoint-dir", str(tmp_path / "ckpt")]
    result = CliRunner().invoke(app, argv, terminal_width=200)
    assert result.exit_code == 2, result.output
    assert "--peer-credential-file" in result.output and "--operators off" in result.output
    assert not (tmp_path / "data" / "commitlog").exists()  # refused before anything was opened


def test_the_supervisor_gives_its_child_the_environment_and_logs_no_secret(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    show = f"import os; print(os.environ.get({TOKEN_ENV!r}), os.environ.get('PATH') is None)"
    log_path = tmp_path / "job.log"
    supervisor = OperatorSupervisor(
        [sys.executable, "-c", show], log_path=log_path, env={TOKEN_ENV: BROKER_SECRET}
    )
    with caplog.at_level(logging.DEBUG, logger="sparkmq.operators"):
        supervisor._spawn()
    wait_until(lambda: not supervisor.running, 30, "the child to exit")
    assert log_path.read_text().split() == [BROKER_SECRET, "True"], "exactly the given environment"
    assert caplog.records and BROKER_SECRET not in caplog.text


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[SecureBroker]:
    broker_user = User("broker-1", token_hashes=(hash_token(BROKER_SECRET),), broker=True)
    with secure_broker(tmp_path, users=[*default_users(), broker_user]) as running:
        yield running


def test_the_jobs_client_does_its_calls_as_the_broker_over_verified_https(
    secured: SecureBroker, tmp_path: Path
) -> None:
    pinned = str(secured.leaf.cert)  # no --tls-ca on this broker: the job pins its certificate
    client = BrokerClient(secured.url, BROKER_SECRET, 10, learn_group=False, tls_ca=pinned)
    assert client.leads() and client.settings()["delay_levels_ms"]
    empty = pa.table({name: pa.array([], pa.int64()) for name in POST_COLUMNS})
    assert client.post_batch("delay", 0, empty)["requests"] == 0
    client.put_status("delay", {"state": "active"})
    with secured.https(token=TOKENS["admin"]) as admin:
        shown = admin.get("/operators").json()["operators"]
    assert [op["state"] for op in shown if op["operator"] == "delay"] == ["active"]


def test_the_jobs_client_refuses_a_broker_its_ca_does_not_vouch_for(
    secured: SecureBroker, tmp_path: Path
) -> None:
    foreign = TestCA(tmp_path / "foreign", "foreign")
    client = BrokerClient(secured.url, BROKER_SECRET, 5, learn_group=False, tls_ca=str(foreign.ca_file))
    assert not client.leads(), "an unverified broker is an unreachable one"


def test_under_required_client_certificates_the_job_presents_the_brokers(tmp_path: Path) -> None:
    broker_user = User("broker-1", token_hashes=(hash_token(BROKER_SECRET),), broker=True)
    users = [*default_users(), broker_user]
    with secure_broker(tmp_path, users=users, require_client_cert=True) as secured:
        leaf, tls_ca = secured.leaf, str(secured.ca.ca_file)
        config = _config(tmp_path, tls=TlsConfig(leaf.cert, leaf.key, secured.ca.ca_file, True))
        argv = list(job_launch(config, tmp_path / "store", tmp_path / "ckpt", "local[1]").argv)
        job = parse_args([*argv[3:], "--tls-ca", tls_ca])
        assert job.client_cert == (str(secured.leaf.cert.resolve()), str(secured.leaf.key.resolve()))
        without = BrokerClient(secured.url, BROKER_SECRET, 5, learn_group=False, tls_ca=tls_ca)
        assert not without.leads(), "no client certificate: the handshake fails"
        client = BrokerClient(
            secured.url, BROKER_SECRET, 10, learn_group=False, tls_ca=tls_ca, client_cert=job.client_cert
        )
        assert client.leads() and client.settings()["delay_levels_ms"]


def test_the_job_runs_the_resolvers_it_is_given_in_their_start_order(tmp_path: Path) -> None:
    launch = job_launch(
        _config(tmp_path), tmp_path / "store", tmp_path / "ckpt", "local[1]", queries=("retry", "delay")
    )
    argv = list(launch.argv)
    assert argv[argv.index("--queries") + 1] == "retry,delay"
    assert parse_args(argv[3:]).queries == ("delay", "retry"), "started in the job's own order"
    all_of_them = list(job_launch(_config(tmp_path), tmp_path / "store", tmp_path / "ckpt", "local[1]").argv)
    assert "--queries" not in all_of_them
    assert parse_args(all_of_them[3:]).queries == ("delay", "transactions", "retry")


@pytest.mark.parametrize("queries", ["", "delay,later"])
def test_serve_refuses_an_unknown_or_empty_resolver_list(tmp_path: Path, queries: str) -> None:
    result = CliRunner().invoke(
        app, ["serve", "--store-dir", str(tmp_path / "store"), "--operator-queries", queries]
    )
    assert result.exit_code == 2
    expected = "unknown resolver(s) later" if queries else "name at least one of"
    assert f"--operator-queries: {expected}" in result.output
    assert not (tmp_path / "store").exists(), "nothing started"


def test_serve_refuses_a_bad_grace_and_the_job_gets_its_lock_and_grace(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["serve", "--store-dir", str(tmp_path / "store"), "--operator-job-grace", "soon"]
    )
    assert result.exit_code == 2 and "--operator-job-grace: bad duration 'soon'" in result.output
    assert not (tmp_path / "store").exists(), "nothing started"
    argv = list(
        job_launch(_config(tmp_path), tmp_path / "store", tmp_path / "ckpt", "local[1]", grace_s=90).argv
    )
    config = parse_args(argv[3:])
    assert (config.lock_file, config.broker_grace_s) == (tmp_path / "ckpt" / "job.lock", 90)
    assert (_grace_s("0"), _grace_s("0s"), _grace_s("90s")) == (0.0, 0.0, 90.0)
    assert (_duration_ms_or_zero(" 0 "), _duration_ms_or_zero("10s")) == (0, 10_000)  # --wheel-lookahead too
    plain = list(job_launch(_config(tmp_path), tmp_path / "store", tmp_path / "ckpt", "local[1]").argv)
    assert "--broker-grace-s" not in plain and parse_args(plain[3:]).broker_grace_s == 0


SLOW = "org.apache.spark.SparkException: Python worker failed to connect back."


def test_a_worker_that_missed_the_connect_back_time_is_started_again_soon_and_apart() -> None:
    failures: list[float] = []
    slow: list[float] = []
    pauses = [_restart_pause("delay", SLOW, failures, slow) for _ in range(SLOW_WORKER_RESTARTS)]
    assert pauses == [2.0] * SLOW_WORKER_RESTARTS and failures == []
    # real failures keep their own budget and back-off
    real = [_restart_pause("delay", "boom", failures, slow) for _ in range(MAX_QUERY_RESTARTS)]
    assert real == [2.0, 4.0, 8.0, 16.0, 30.0]
    assert _restart_pause("delay", "boom", failures, slow) is None
    assert _restart_pause("delay", SLOW, [], slow) is None  # one slow start too many


def test_a_status_shows_the_queues_offsets_not_the_sources_clock() -> None:
    """The transaction query's source carries a clock in its offsets (``clockIntervalMs``); the
    status the broker shows lists only real queues, and the clock adds no lag."""
    end = json.dumps({"RMQ_SYS_TRANS_HALF_TOPIC/0": 7, "~clock/0": 115_000_000})
    latest = json.dumps({"RMQ_SYS_TRANS_HALF_TOPIC/0": 9})
    progress = {"batchId": 3, "sources": [{"endOffset": end, "latestOffset": latest}]}
    query = SimpleNamespace(id="q", isActive=True, status={}, lastProgress=progress)
    status = query_status(query)
    assert status["end_offsets"] == {"RMQ_SYS_TRANS_HALF_TOPIC/0": 7}
    assert status["input_lag"] == 2 and status["last_batch_id"] == 3
