"""Property tests: any command survives encode -> decode in both header encodings, and no byte
string makes the decoder fail with anything but MalformedFrame."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ingest_api.remoting.batch import BatchEntry, decode_batch, encode_batch
from ingest_api.remoting.codec import (
    RemotingCommand,
    decode_frame,
    decode_json_header,
    encode_command,
    encode_json_header,
)
from ingest_api.remoting.codes import LanguageCode, SerializeType
from ingest_api.remoting.errors import BodyError, MalformedFrame

int32 = st.integers(-(2**31), 2**31 - 1)
int16 = st.integers(-(2**15), 2**15 - 1)
nonempty = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=20)

commands = st.builds(
    RemotingCommand,
    code=int16,
    opaque=int32,
    flag=int32,
    language=st.sampled_from(list(LanguageCode)),
    version=int16,
    remark=st.none() | nonempty,
    ext_fields=st.dictionaries(nonempty, nonempty, max_size=8),
    body=st.binary(max_size=64),
    serialize_type=st.sampled_from(list(SerializeType)),
)


@settings(max_examples=300)
@given(commands)
def test_round_trip(cmd: RemotingCommand) -> None:
    frame = encode_command(cmd)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert decode_frame(frame[4:]) == cmd


@settings(max_examples=200)
@given(commands)
def test_strict_and_lenient_json_readers_agree(cmd: RemotingCommand) -> None:
    """decode_frame reads a Java client's JSON header in one typed pass; the lenient reader
    (nulls, numbers in extFields, error messages) must read it the same."""
    header = encode_json_header(cmd)
    lenient = RemotingCommand(**decode_json_header(header), body=cmd.body, serialize_type=SerializeType.JSON)
    word = len(header).to_bytes(4, "big")
    assert decode_frame(word + header + cmd.body) == lenient


def _decode(frame: bytes) -> RemotingCommand | MalformedFrame:
    try:
        return decode_frame(frame)
    except MalformedFrame as exc:
        return exc


@settings(max_examples=300)
@given(st.binary(max_size=80), st.sampled_from([0, 1, 7]))
def test_garbage_raises_only_malformed_frame(garbage: bytes, kind: int) -> None:
    header_length = min(len(garbage), 0xFFFFFF)
    outcome = _decode(((kind << 24) | header_length).to_bytes(4, "big") + garbage)
    if isinstance(outcome, MalformedFrame):
        assert str(outcome)  # says what was wrong
    else:
        assert isinstance(outcome, RemotingCommand) and outcome.body == b""


@settings(max_examples=200)
@given(
    st.lists(
        st.builds(
            BatchEntry,
            flag=int32,
            body=st.binary(max_size=40),
            properties=st.dictionaries(
                st.text("abcXYZ_", min_size=1, max_size=6),
                st.text("abc 123", min_size=1, max_size=6),
                max_size=3,
            ),
        ),
        max_size=5,
    )
)
def test_batch_round_trip(entries: list[BatchEntry]) -> None:
    assert decode_batch(encode_batch(entries)) == entries


def _split(raw: bytes) -> list[BatchEntry] | BodyError:
    try:
        return decode_batch(raw)
    except BodyError as exc:
        return exc


@settings(max_examples=200)
@given(st.binary(max_size=60))
def test_batch_garbage_raises_only_body_error(garbage: bytes) -> None:
    outcome = _split(garbage)
    if isinstance(outcome, BodyError):
        assert "message batch" in str(outcome)
    else:
        assert all(isinstance(entry, BatchEntry) for entry in outcome)
