"""The ``--cluster`` address parser: what is accepted, and what each refusal says."""

from __future__ import annotations

import pytest

from cluster import DEFAULT_CHROOT, InvalidClusterAddress, parse_cluster_address


def test_one_server_default_chroot() -> None:
    address = parse_cluster_address("zk://127.0.0.1:2181")
    assert address.servers == (("127.0.0.1", 2181),)
    assert address.chroot == DEFAULT_CHROOT == "/sparkmq"
    assert address.hosts == "127.0.0.1:2181"
    assert str(address) == "zk://127.0.0.1:2181/sparkmq"


def test_ensemble_and_chroot() -> None:
    address = parse_cluster_address("zk://zk1:2181,zk2.example.com:2182,[::1]:2183/prod/mq")
    assert address.servers == (("zk1", 2181), ("zk2.example.com", 2182), ("[::1]", 2183))
    assert address.chroot == "/prod/mq"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("127.0.0.1:2181", "expected zk://"),
        ("zk://", "no ZooKeeper server"),
        ("zk:///chroot", "no ZooKeeper server"),
        ("zk://127.0.0.1", "needs HOST:PORT"),
        ("zk://127.0.0.1:0", "not in 1..65535"),
        ("zk://127.0.0.1:99999", "not in 1..65535"),
        ("zk://127.0.0.1:21x1", "not in 1..65535"),
        ("zk://bad host:2181", "not a host name"),
        ("zk://127.0.0.1:2181/", "is not a path"),
        ("zk://127.0.0.1:2181/a//b", "is not a path"),
        ("zk://127.0.0.1:2181/a b", "may only hold"),
        ("zk://127.0.0.1:2181/..", "may only hold"),
        ("zk://a:1,,b:2", "needs HOST:PORT"),
    ],
)
def test_refusals_say_what_is_wrong(value: str, says: str) -> None:
    with pytest.raises(InvalidClusterAddress, match=says):
        parse_cluster_address(value)


def test_a_digest_identity_in_the_address_is_never_printed() -> None:
    address = parse_cluster_address("zk://sparkmq:s3cret-pass@zk1:2181,zk2:2182/prod")
    assert address.servers == (("zk1", 2181), ("zk2", 2182)) and address.chroot == "/prod"
    assert address.digest is not None and address.digest.user == "sparkmq"
    assert address.digest.auth_data == "sparkmq:s3cret-pass"
    assert str(address) == "zk://sparkmq:***@zk1:2181,zk2:2182/prod"
    assert "s3cret" not in repr(address)
    assert parse_cluster_address("zk://zk1:2181").digest is None


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("zk://sparkmq@zk1:2181", "USER:PASSWORD"),
        ("zk://:password1@zk1:2181", "USER:PASSWORD"),
        ("zk://sparkmq:short@zk1:2181", ">= 8"),
        ("zk://spark mq:password1@zk1:2181", "USER:PASSWORD"),
    ],
)
def test_a_bad_digest_identity_is_refused_without_quoting_it(value: str, says: str) -> None:
    with pytest.raises(InvalidClusterAddress, match=says) as info:
        parse_cluster_address(value)
    assert "password1" not in str(info.value) and "short" not in str(info.value).replace("characters", "")
