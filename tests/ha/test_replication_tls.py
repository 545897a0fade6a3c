"""Mutual TLS on the replication port, with real certificates of a test CA over real TCP.

A slave whose certificate is of the cluster CA and names the member it claims to be replicates
byte for byte. A missing, foreign-CA, expired or mismatched certificate gets not one byte of the
master's log (raw TLS clients read what the master sends, real slaves stay empty), the master
lists no such slave, and its port still accepts TCP connections: the cluster's watchdog
(``cluster.replica_group._refused``) does not read a failed handshake as a dead master.
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import pytest

from cluster.replica_group import _refused
from store.ha import ReplicationMode
from store.ha.frames import SlaveHandshake, encode_slave_ack, encode_slave_handshake
from store.ha.tls import HATls, certificate_identity
from tests.support.replicas import Group, Node, commitlog_files
from tests.support.tls import LeafFiles, TestCA
from tests.support.waiting import wait_until

SYNC = ReplicationMode.SYNC


def tls_of(ca: TestCA, leaf: LeafFiles) -> HATls:
    return HATls(leaf.cert, leaf.key, ca.ca_file, handshake_timeout_s=3.0)


def members_named(member_id: int, identity: str) -> bool:
    """The cluster's registrations in these tests: member n's certificate is ``member-n``."""
    return identity == f"member-{member_id}"


@pytest.fixture
def ca(tmp_path: Path) -> TestCA:
    return TestCA(tmp_path / "pki")


@pytest.fixture
def master(group: Group, ca: TestCA) -> Node:
    node = group.node(1, replication=SYNC, tls=tls_of(ca, ca.issue("member-1")), identity_check=members_named)
    group.elect(node, 1)
    for i in range(50):
        node.store.put_batch("orders", [f"m{i}-{j}".encode() * 20 for j in range(5)], queue_ids=[0] * 5)
    return node


def bytes_sent_to(master: Node, context: ssl.SSLContext | None, broker_id: int) -> int:
    """Connect as a slave (TLS with ``context``, or plain TCP), send the 16-byte handshake and
    an ack of offset 0, and count the bytes the master sends before closing."""
    host, port = master.ha.ha_address.rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout=2)
    received = 0
    try:
        sock: socket.socket = raw if context is None else context.wrap_socket(raw, server_hostname=host)
        sock.sendall(encode_slave_handshake(SlaveHandshake(broker_id)) + encode_slave_ack(0))
        while chunk := sock.recv(65536):
            received += len(chunk)
    except (ssl.SSLError, ConnectionError, TimeoutError):
        pass
    finally:
        raw.close()
    return received


def test_a_member_with_its_certificate_replicates_byte_for_byte(
    group: Group, ca: TestCA, master: Node
) -> None:
    slave = group.node(2, tls=tls_of(ca, ca.issue("member-2")))
    slave.ha.become_slave(master.ha.ha_address, 1)
    wait_until(lambda: slave.store.commitlog_max_offset == master.store.commitlog_max_offset, timeout_s=20)
    assert commitlog_files(slave.directory) == commitlog_files(master.directory)
    assert [s.broker_id for s in master.ha.status().slaves] == [2]
    assert certificate_identity(ca.issue("member-2").cert.read_bytes()) == "member-2"


@pytest.mark.parametrize("case", ["no certificate", "foreign CA", "expired", "another member's"])
def test_a_bad_certificate_gets_no_log_bytes_and_is_no_dead_master(
    case: str, tmp_path: Path, ca: TestCA, master: Node
) -> None:
    if case == "no certificate":
        context = ssl.create_default_context(cafile=str(ca.ca_file))
    elif case == "foreign CA":
        foreign = TestCA(tmp_path / "foreign", "foreign")
        context = foreign.client_context(foreign.issue("member-2"))
        context.load_verify_locations(ca.ca_file)  # it trusts the master: only the master refuses
    elif case == "expired":
        context = ca.client_context(ca.issue("member-2", expired=True))
    else:
        context = ca.client_context(ca.issue("member-3"))  # a valid member, claiming id 2
    assert bytes_sent_to(master, context, broker_id=2) == 0
    assert bytes_sent_to(master, None, broker_id=2) == 0  # plain TCP to a TLS port
    assert master.ha.status().slaves == ()
    assert not _refused(master.ha.ha_address)  # the port answers: no election from the watchdog
    # the right certificate still works afterwards
    assert bytes_sent_to(master, ca.client_context(ca.issue("member-2")), broker_id=2) > 0


@pytest.mark.parametrize("case", ["expired", "another member's"])
def test_a_real_slave_with_a_bad_certificate_stays_empty(
    case: str, group: Group, ca: TestCA, master: Node
) -> None:
    leaf = ca.issue("member-2", expired=True) if case == "expired" else ca.issue("member-3")
    slave = group.node(2, tls=tls_of(ca, leaf))
    slave.ha.become_slave(master.ha.ha_address, 1)
    wait_until(lambda: "replication from" in slave.ha.status().last_error, timeout_s=20)
    wait_until(lambda: master.ha.status().last_error, timeout_s=20)
    assert slave.store.commitlog_max_offset == 0
    assert not slave.ha.master_connected
    assert master.ha.status().slaves == ()


def test_a_slave_checks_the_masters_certificate(group: Group, tmp_path: Path, ca: TestCA) -> None:
    foreign = TestCA(tmp_path / "foreign", "foreign")
    impostor = group.node(1, tls=HATls(*_pair(foreign.issue("member-1")), foreign.ca_file))
    group.elect(impostor, 1)
    impostor.store.put_batch("orders", [b"secret"], queue_ids=[0])
    slave = group.node(2, tls=tls_of(ca, ca.issue("member-2")))
    slave.ha.become_slave(impostor.ha.ha_address, 1)
    wait_until(lambda: "CERTIFICATE_VERIFY_FAILED" in slave.ha.status().last_error, timeout_s=20)
    assert slave.store.commitlog_max_offset == 0


def _pair(leaf: LeafFiles) -> tuple[Path, Path]:
    return leaf.cert, leaf.key
