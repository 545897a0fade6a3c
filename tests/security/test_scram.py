"""SCRAM-SHA-256/512: the RFC 7677 vector byte for byte, a SHA-512 vector pinned from scramp,
both directions against scramp (a second implementation), and broken exchanges."""

from __future__ import annotations

import base64
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
import scramp
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.security import (
    GENERIC_FAILURE,
    AuthenticationFailed,
    IllegalSaslState,
    MalformedSaslMessage,
    ScramClient,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    ScramState,
    make_credential,
)
from broker.security.errors import InvalidUsersFile, SecurityError
from broker.security.scram_format import (
    MIN_ITERATIONS,
    escape_saslname,
    mock_credential,
    parse_client_first,
)
from broker.security.secret_file import load_or_create_secret

SHA256, SHA512 = ScramMechanism.SHA_256, ScramMechanism.SHA_512
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
C_NONCE = "rOprNGfwEbeRWgbNEkqO"
S_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
MOCK_SECRET = b"mock-secret-for-tests-32-bytes!!"
#: RFC 7677 section 3 (SCRAM-SHA-256, user "user", password "pencil").
RFC7677 = (
    b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
)
#: The same inputs with SCRAM-SHA-512, as scramp 1.5.0 computes them (pinned; the differential
#: tests below keep checking against scramp itself).
SHA512_VECTOR = (
    RFC7677[0],
    RFC7677[1],
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=gMGXRcevScNtxZ6/8lQYpGtnsNAc3mGcmNomv+xnoOMw"
    b"+3R2xNJdMNnzMlTN8PPC6wdp6dybEmDYXYTxwnYPJQ==",
    b"v=ZQnYEgWQMFmmsM8aQMF0nDDCy/AgCzkwk8CmMZYcMg0vSVlKDanekLtifDSeVGT4+5ZxXnJq199RVG2rR7N7Zw==",
)
SHA512_STORED = "6AAub3065EYRmyFpM2RNwqK+eGnrkYuEWbXn19LsEmBqzu8QaCXNc1FwpnX9NhH2hK/60dzj9DoO5DvVkOHbvg=="
SHA512_SERVER = "jZHbYjC1aHh0/hKbxyBuGFjDrgjgKTT1esA7awWiKcRZ0o/0b1yWEebBeSVkkCFewf91nLDfKF24mvD5nmE6rA=="


def server_for(
    mechanism: ScramMechanism, users: dict[str, ScramCredential], nonce: str = S_NONCE
) -> ScramServer:
    return ScramServer(mechanism, lambda name, _m: users.get(name), MOCK_SECRET, nonce_factory=lambda: nonce)


def exchange(server: ScramServer, client: ScramClient) -> tuple[bytes, bytes, bytes, bytes]:
    client_first = client.client_first()
    server_first = server.handle_client_first(client_first)
    client_final = client.handle_server_first(server_first)
    server_final = server.handle_client_final(client_final)
    client.handle_server_final(server_final)
    return client_first, server_first, client_final, server_final


@pytest.mark.parametrize(("mechanism", "vector"), [(SHA256, RFC7677), (SHA512, SHA512_VECTOR)])
def test_golden_vectors_byte_for_byte(mechanism: ScramMechanism, vector: tuple[bytes, ...]) -> None:
    credential = make_credential(mechanism, "pencil", salt=RFC_SALT, iterations=4096)
    server = server_for(mechanism, {"user": credential})
    client = ScramClient(mechanism, "user", "pencil", nonce=C_NONCE)
    assert exchange(server, client) == vector
    assert server.state is ScramState.COMPLETE and server.username == "user"


def test_sha512_stored_keys_match_scramp() -> None:
    credential = make_credential(SHA512, "pencil", salt=RFC_SALT, iterations=4096)
    assert credential.to_kafka() == (
        f"salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key={SHA512_STORED},server_key={SHA512_SERVER},iterations=4096"
    )
    assert ScramCredential.from_kafka(credential.to_kafka(), SHA512, "x") == credential


@settings(max_examples=15, deadline=None)
@given(
    mechanism=st.sampled_from([SHA256, SHA512]),
    name=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=20),
    password=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=30),
)
def test_both_directions_against_scramp(mechanism: ScramMechanism, name: str, password: str) -> None:
    """ASCII passwords: scramp SASLpreps, Kafka does not; they agree on printable ASCII."""
    credential = make_credential(mechanism, password)
    ours = server_for(mechanism, {name: credential}, nonce="s3rv3r")
    theirs_client = scramp.ScramClient([mechanism.value], name, password)
    server_first = ours.handle_client_first(theirs_client.get_client_first().encode())
    theirs_client.set_server_first(server_first.decode())
    server_final = ours.handle_client_final(theirs_client.get_client_final().encode())
    theirs_client.set_server_final(server_final.decode())  # raises if our signature is wrong
    auth_info = (credential.salt, credential.stored_key, credential.server_key, credential.iterations)
    asked: list[str] = []

    def auth_fn(user: str) -> tuple[bytes, bytes, bytes, int]:
        asked.append(user)
        return auth_info

    theirs_server = scramp.ScramMechanism(mechanism.value).make_server(auth_fn)
    our_client = ScramClient(mechanism, name, password)
    theirs_server.set_client_first(our_client.client_first().decode())
    client_final = our_client.handle_server_first(theirs_server.get_server_first().encode())
    theirs_server.set_client_final(client_final.decode())  # raises if our proof is wrong
    our_client.handle_server_final(theirs_server.get_server_final().encode())
    assert asked == [name]


def completed_first(mechanism: ScramMechanism = SHA256) -> tuple[ScramServer, ScramClient]:
    credential = make_credential(mechanism, "pencil", salt=RFC_SALT)
    server = server_for(mechanism, {"user": credential})
    client = ScramClient(mechanism, "user", "pencil", nonce=C_NONCE)
    return server, client


def test_wrong_password_and_unknown_user_fail_alike() -> None:
    failures = []
    for user, password in (("user", "wrong"), ("nobody", "pencil")):
        server, _ = completed_first()
        client = ScramClient(SHA256, user, password, nonce=C_NONCE)
        server_first = server.handle_client_first(client.client_first())
        with pytest.raises(AuthenticationFailed) as failed:
            server.handle_client_final(client.handle_server_first(server_first))
        failures.append((type(failed.value), str(failed.value)))
        assert server.state is ScramState.FAILED
        with pytest.raises(IllegalSaslState):
            _ = server.username
    assert failures == [(AuthenticationFailed, GENERIC_FAILURE)] * 2


def test_unknown_users_server_first_looks_real_and_is_stable() -> None:
    server_a, server_b = server_for(SHA256, {}), server_for(SHA256, {})
    first_a = server_a.handle_client_first(b"n,,n=ghost,r=abc")
    assert first_a == server_b.handle_client_first(b"n,,n=ghost,r=abc")
    assert (
        first_a.endswith(b",i=4096") and len(base64.b64decode(first_a.split(b",s=")[1].split(b",")[0])) == 16
    )
    other = server_for(SHA256, {}).handle_client_first(b"n,,n=ghost2,r=abc")
    assert other.split(b",s=")[1] != first_a.split(b",s=")[1]
    assert mock_credential(SHA256, MOCK_SECRET, "ghost") == mock_credential(SHA256, MOCK_SECRET, "ghost")


def test_a_stored_count_below_4096_reads_as_an_unknown_user() -> None:
    weak = make_credential(SHA256, "pencil", iterations=MIN_ITERATIONS)
    weak = ScramCredential(weak.salt, weak.stored_key, weak.server_key, 1000)
    server = server_for(SHA256, {"user": weak})
    client = ScramClient(SHA256, "user", "pencil", nonce=C_NONCE, max_iterations=16384)
    server_first = server.handle_client_first(client.client_first())
    assert server_first.endswith(b"i=4096")
    with pytest.raises(AuthenticationFailed):
        server.handle_client_final(client.handle_server_first(server_first))


def test_wrong_nonce_and_binding_are_refused() -> None:
    mutations: tuple[Callable[[bytes], bytes], ...] = (
        lambda final: final.replace(S_NONCE.encode(), b"other-nonce"),
        lambda final: final.replace(b"c=biws", b"c=eSws"),  # "y,," : a binding flag it never sent
        lambda final: final.replace(b"r=" + C_NONCE.encode(), b"r=X" + C_NONCE.encode()),
    )
    for mutate in mutations:
        server, client = completed_first()
        final = client.handle_server_first(server.handle_client_first(client.client_first()))
        with pytest.raises(MalformedSaslMessage):
            server.handle_client_final(mutate(final))
        assert server.state is ScramState.FAILED


def test_bad_proofs_are_refused() -> None:
    mutations: tuple[Callable[[bytes], bytes], ...] = (
        lambda proof: proof[:-1] + bytes([proof[-1] ^ 1]),  # one bit off: bad credentials
        lambda proof: proof[:10],  # wrong length: malformed
    )
    for mutate in mutations:
        server, client = completed_first()
        final = client.handle_server_first(server.handle_client_first(client.client_first()))
        head, _, proof = final.partition(b",p=")
        with pytest.raises(AuthenticationFailed):
            server.handle_client_final(head + b",p=" + base64.b64encode(mutate(base64.b64decode(proof))))
    server, client = completed_first()
    final = client.handle_server_first(server.handle_client_first(client.client_first()))
    with pytest.raises(MalformedSaslMessage, match="base64"):
        server.handle_client_final(final[:-3] + b"*==")


@pytest.mark.parametrize(
    ("message", "rule"),
    [
        (b"n=user,r=abc", "gs2 header"),  # no gs2 header
        (b"y,,n=user,r=abc", "gs2 header"),
        (b"p=tls-unique,,n=user,r=abc", "gs2 header"),
        (b"n,,n=user,r=abc,ext=1", "no extensions"),
        (b"n,,m=ext,n=user,r=abc", "attributes"),
        (b"n,,r=abc,n=user", "'n='"),
        (b"n,,n=us=er,r=abc", "saslname"),
        (b"n,,n=us=2Xer,r=abc", "saslname"),
        (b"n,,n=,r=abc", "saslname"),
        (b"n,,n=user,r=a,b", "no extensions"),
        (b"n,,n=user,r=", "nonce"),
        (b"n,,n=user,r=ab\x01c", "nonce"),
        (b"n,a=other,n=user,r=abc", "authzid"),
        (b"n,x=user,n=user,r=abc", "authzid"),
        (b"n,", "truncated"),
        (b"n,,n=\xff,r=abc", "UTF-8"),
        (b"n,,n=user,r=" + b"a" * 5000, "longer"),
    ],
)
def test_malformed_client_first(message: bytes, rule: str) -> None:
    with pytest.raises(MalformedSaslMessage, match=rule):
        server_for(SHA256, {}).handle_client_first(message)


def test_saslname_escapes() -> None:
    name = "a,b=c"
    assert escape_saslname(name) == "a=2Cb=3Dc"
    assert parse_client_first(b"n,a=a=2Cb=3Dc,n=a=2Cb=3Dc,r=xyz").username == name
    credential = make_credential(SHA512, "pw")
    server = server_for(SHA512, {name: credential})
    exchange(server, ScramClient(SHA512, name, "pw"))
    assert server.username == name


def test_steps_out_of_order() -> None:
    server, client = completed_first()
    with pytest.raises(IllegalSaslState):
        server.handle_client_final(b"c=biws,r=x,p=AAAA")
    exchange(server, client)
    with pytest.raises(IllegalSaslState):
        server.handle_client_first(b"n,,n=user,r=abc")
    with pytest.raises(IllegalSaslState):
        ScramClient(SHA256, "u", "p").handle_server_first(b"r=x,s=AAAA,i=4096")


def test_client_refuses_a_server_that_cannot_prove_itself() -> None:
    server, client = completed_first()
    server_first = server.handle_client_first(client.client_first())
    server.handle_client_final(client.handle_server_first(server_first))
    with pytest.raises(AuthenticationFailed, match="not the real server"):
        client.handle_server_final(b"v=" + base64.b64encode(b"\0" * 32))
    _, client = completed_first()
    client.client_first()
    with pytest.raises(MalformedSaslMessage, match="nonce"):
        client.handle_server_first(b"r=someone-else,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    _, client = completed_first()
    client.client_first()
    with pytest.raises(MalformedSaslMessage, match="iteration"):
        client.handle_server_first(f"r={C_NONCE}x,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=999999".encode())


@pytest.mark.parametrize(
    "text",
    [
        "salt=AAAA,stored_key=AAAA,server_key=AAAA",
        "salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=4096,extra=1",
        "salt=!!,stored_key=AAAA,server_key=AAAA,iterations=4096",
        "salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=1000",
        "salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=4096",  # key sizes
        "salt=AAAA,salt=AAAA,server_key=AAAA,iterations=4096",
    ],
)
def test_stored_credential_errors(text: str) -> None:
    with pytest.raises(InvalidUsersFile, match="users\\[0\\]"):
        ScramCredential.from_kafka(text, SHA256, "users[0]")


def test_make_credential_refuses_weak_input() -> None:
    with pytest.raises(ValueError, match="empty"):
        make_credential(SHA256, "")
    with pytest.raises(ValueError, match="iterations"):
        make_credential(SHA256, "pw", iterations=100)


def test_mock_iterations_follow_the_real_users() -> None:
    server = ScramServer(SHA256, lambda _n, _m: None, MOCK_SECRET, mock_iterations=8192)
    assert server.handle_client_first(b"n,,n=ghost,r=abc").endswith(b",i=8192")


def test_the_mock_secret_file_is_stable_and_private(tmp_path: Path) -> None:
    path = tmp_path / "scram-mock.secret"
    secret = load_or_create_secret(path)
    assert len(secret) == 32 and load_or_create_secret(path) == secret
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)
    with pytest.raises(SecurityError, match="chmod 600"):
        load_or_create_secret(path)
    path.chmod(0o600)
    path.write_bytes(b"short")
    with pytest.raises(SecurityError, match="32-byte"):
        load_or_create_secret(path)
