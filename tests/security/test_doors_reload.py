"""The users file reloaded without a restart: a changed file applies to both doors, a removed
user's Kafka connection is closed, a new user is admitted, a broken file keeps the old users;
SIGHUP reloads at once."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

import pytest

from broker.auth import DoorAuth
from broker.auth_reload import auth_reloading
from broker.security import User, UsersFile, hash_token
from tests.kafka.rawclient import RawClient
from tests.security.test_kafka_sasl_wire import metadata_works, scram_login
from tests.support.secure_broker import (
    PASSWORDS,
    TOKENS,
    default_users,
    scram_of,
    secure_broker,
    write_users_file,
)
from tests.support.waiting import wait_until

DAVE_PASSWORD = "d4ve-secret-thud-7777"
DAVE_TOKEN = "dave-token-xyzzy-0b1e2c3d4e"


def dave() -> User:
    return User("dave", token_hashes=(hash_token(DAVE_TOKEN),), scram=scram_of(DAVE_PASSWORD), consume=("*",))  # type: ignore[arg-type]


def test_a_changed_file_applies_without_restart(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    users = default_users()
    with secure_broker(tmp_path, tls=False, users=users) as secured:
        alice_kafka = RawClient(secured.kafka_port)
        bob_kafka = RawClient(secured.kafka_port)
        assert scram_login(alice_kafka, "SCRAM-SHA-256", "alice", PASSWORDS["alice"]).error_code == 0
        assert scram_login(bob_kafka, "SCRAM-SHA-512", "bob", PASSWORDS["bob"]).error_code == 0
        alice_http = secured.https(TOKENS["alice"])
        assert alice_http.get("/topics").status_code == 200
        dave_http = secured.https(DAVE_TOKEN)
        assert dave_http.get("/topics").status_code == 401

        secured.set_users([user for user in users if user.name != "alice"] + [dave()])
        wait_until(alice_kafka.closed_by_peer, what="the removed user's Kafka connection to close")
        wait_until(lambda: dave_http.get("/topics").status_code == 200, what="the new user's token")
        assert alice_http.get("/topics").status_code == 401
        assert metadata_works(bob_kafka)  # an unchanged user's connection stays open
        with RawClient(secured.kafka_port) as newcomer:
            assert scram_login(newcomer, "SCRAM-SHA-256", "dave", DAVE_PASSWORD).error_code == 0
            assert metadata_works(newcomer)
        with RawClient(secured.kafka_port) as removed:
            assert scram_login(removed, "SCRAM-SHA-256", "alice", PASSWORDS["alice"]).error_code == 58

        caplog.set_level(logging.INFO, logger="broker.auth_reload")
        secured.users_file.write_text('{"users": [{"name": "x", "tokens": "broken"}]}')
        wait_until(lambda: "users file not reloaded" in caplog.text, what="the broken file's rejection")
        assert "broken" not in caplog.text  # the log names the field, not the contents
        with RawClient(secured.kafka_port) as still:  # the old users stay
            assert scram_login(still, "SCRAM-SHA-256", "dave", DAVE_PASSWORD).error_code == 0
        assert dave_http.get("/topics").status_code == 200
        alice_kafka.close()
        bob_kafka.close()


def test_sighup_reloads_at_once(tmp_path: Path) -> None:
    path = write_users_file(tmp_path / "users.json", default_users())
    auth = DoorAuth(UsersFile(path), b"s" * 32)

    async def scenario() -> bool:
        async with auth_reloading(auth, interval_s=3600):  # the poll would not come in time
            write_users_file(path, [dave()])
            os.kill(os.getpid(), signal.SIGHUP)
            for _ in range(200):
                await asyncio.sleep(0.01)
                if auth.table.user("dave") is not None:
                    return True
        return False

    assert asyncio.run(scenario())
    assert auth.table.user("alice") is None
