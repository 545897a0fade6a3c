"""Golden bytes of the receipt handle (broker/pop/handle.py); malformed and forged handles."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from broker.pop.errors import InvalidReceiptHandle
from broker.pop.handle import MAX_HANDLE_CHARS, ReceiptHandle, decode_handle, encode_handle
from broker.pop.state_codec import Source

SECRET = b"k" * 32
HANDLE = ReceiptHandle("g", "t", Source.TOPIC, 1, 5, 0x1122334455667788, 123456)
PAYLOAD = bytes.fromhex(
    "01"  # version
    "00"  # source TOPIC
    "00000001"  # queue 1
    "0000000000000005"  # queue offset 5
    "1122334455667788"  # generation
    "000000000001e240"  # visible at 123456
    "01"
    "67"  # group 'g'
    "01"
    "74"  # topic 't'
)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_golden_handle() -> None:
    mac = hmac.new(SECRET, PAYLOAD, hashlib.sha256).digest()[:16]
    text = encode_handle(HANDLE, SECRET)
    assert text == _b64(PAYLOAD + mac)
    assert text == "AQAAAAABAAAAAAAAAAURIjNEVWZ3iAAAAAAAAeJAAWcBdMoUcbuyYIuQpzMlLphqM7M"
    assert decode_handle(text, SECRET) == HANDLE


def test_forged_and_altered_handles_are_invalid() -> None:
    text = encode_handle(HANDLE, SECRET)
    with pytest.raises(InvalidReceiptHandle, match="signature"):
        decode_handle(text, b"x" * 32)  # another broker's secret
    raw = bytearray(base64.urlsafe_b64decode(text + "=="))
    raw[6] ^= 1  # another queue offset, same mac
    with pytest.raises(InvalidReceiptHandle, match="signature"):
        decode_handle(_b64(bytes(raw)), SECRET)
    forged = PAYLOAD + bytes(16)
    with pytest.raises(InvalidReceiptHandle):
        decode_handle(_b64(forged), SECRET)


@pytest.mark.parametrize("text", ["", "!!!!", "a", "AQAB", "x" * (MAX_HANDLE_CHARS + 1), "====="])
def test_malformed_handles_are_invalid(text: str) -> None:
    with pytest.raises(InvalidReceiptHandle) as info:
        decode_handle(text, SECRET)
    assert info.value.code == "invalid_receipt_handle"


def test_signed_but_truncated_names_are_invalid() -> None:
    payload = PAYLOAD[:-1]  # topic length says 1 byte, none follows
    mac = hmac.new(SECRET, payload, hashlib.sha256).digest()[:16]
    with pytest.raises(InvalidReceiptHandle, match="truncated"):
        decode_handle(_b64(payload + mac), SECRET)
