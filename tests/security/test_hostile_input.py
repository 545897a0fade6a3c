"""Pre-authentication input is hostile: every parser fails only with its one typed error
(never ``IndexError``, ``UnicodeError``, ``binascii.Error``...), whatever the bytes, and what
it accepts re-encodes to the same bytes."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.security import MalformedSaslMessage, ScramMechanism, ScramServer, make_credential
from broker.security.errors import AuthenticationFailed
from broker.security.plain import format_plain, parse_plain
from broker.security.scram_format import (
    format_server_first,
    parse_client_final,
    parse_client_first,
    parse_server_first,
)
from ingest_api.kafka.errors import MalformedFrame
from ingest_api.kafka.sasl import decode_sasl_authenticate_request, decode_sasl_handshake_request

PIECES = [
    b"n",
    b",",
    b"=",
    b"a=",
    b"n=",
    b"r=",
    b"s=",
    b"i=",
    b"c=",
    b"p=",
    b"biws",
    b"=2C",
    b"x",
    b"4096",
    b"\xff",
]
#: Bytes that often look like a SCRAM message, and plain noise.
SCRAMISH = st.one_of(st.binary(max_size=80), st.lists(st.sampled_from(PIECES), max_size=20).map(b"".join))
CREDENTIAL = make_credential(ScramMechanism.SHA_256, "pencil")


@settings(max_examples=300, deadline=None)
@given(SCRAMISH)
def test_scram_parsers(data: bytes) -> None:
    with contextlib.suppress(MalformedSaslMessage):
        first = parse_client_first(data)
        assert data.decode() == first.gs2_header + first.bare
    with contextlib.suppress(MalformedSaslMessage):
        server_first = parse_server_first(data)
        assert (
            format_server_first(server_first.nonce, server_first.salt, server_first.iterations)
            == data.decode()
        )
    with contextlib.suppress(MalformedSaslMessage):
        final = parse_client_final(data, ScramMechanism.SHA_256)
        assert data.decode().startswith(final.without_proof + ",p=")


@settings(max_examples=200, deadline=None)
@given(SCRAMISH)
def test_scram_server_second_step(data: bytes) -> None:
    server = ScramServer(ScramMechanism.SHA_256, lambda _n, _m: CREDENTIAL, b"k", nonce_factory=lambda: "s")
    server.handle_client_first(b"n,,n=user,r=c")
    with pytest.raises(AuthenticationFailed):  # MalformedSaslMessage is one
        server.handle_client_final(b"c=biws,r=cs," + data)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=60))
def test_plain_parser(data: bytes) -> None:
    with contextlib.suppress(MalformedSaslMessage):
        message = parse_plain(data)
        assert format_plain(message.username, message.password, message.authzid) == data


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40), st.sampled_from([0, 1, 2]))
def test_sasl_frame_decoders(body: bytes, version: int) -> None:
    frame = version.to_bytes(2) + b"\0\0\0\1\xff\xff" + body
    with contextlib.suppress(MalformedFrame):
        assert decode_sasl_handshake_request(b"\0\x11" + frame).api_version == version
    with contextlib.suppress(MalformedFrame):
        assert decode_sasl_authenticate_request(b"\0\x24" + frame).correlation_id == 1
