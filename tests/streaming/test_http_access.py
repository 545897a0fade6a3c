"""The Spark source's and sink's credential and TLS options, Kafka's security settings mapped
onto HTTP credentials (streaming/http_access.py)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from streaming.http_access import InvalidAccessOption, auth_headers, parse_access, ssl_context
from streaming.options import InvalidSourceOption, parse_options
from streaming.sink_columns import InvalidSinkOption, parse_sink_options
from tests.support.tls import TestCA

HTTPS = "https://127.0.0.1:8443"
JAAS = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="p@ss\\"w";'
)


def test_token_and_the_former_auth_token_are_bearer_tokens() -> None:
    assert parse_access({"token": "t0k"}, HTTPS) == ("t0k", None)
    assert parse_access({"authtoken": "t0k"}, "http://h:1") == ("t0k", None)
    assert auth_headers("t0k") == {"Authorization": "Bearer t0k"}
    assert auth_headers(None) == {}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_sasl_options_map_onto_http_basic(mechanism: str, tmp_path: Path) -> None:
    ca = TestCA(tmp_path)
    options = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": mechanism,
        "kafka.sasl.jaas.config": JAAS,
        "kafka.ssl.truststore.location": str(ca.ca_file),
        "kafka.ssl.truststore.type": "PEM",
    }
    auth, tls_ca = parse_access(options, HTTPS)
    assert auth == "Basic " + base64.b64encode(b'alice:p@ss"w').decode()
    assert auth_headers(auth) == {"Authorization": auth}
    assert tls_ca == str(ca.ca_file)
    assert ssl_context(tls_ca) is not None


@pytest.mark.parametrize(
    ("options", "named", "why"),
    [
        ({"kafka.security.protocol": "SASL_PLAINTEXT"}, "kafka.sasl.jaas.config", "username"),
        (
            {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "GSSAPI"},
            "kafka.sasl.mechanism",
            "one of",
        ),
        ({"kafka.security.protocol": "SSL"}, "kafka.security.protocol", "https://"),
        ({"tlsca": "/ca.pem"}, "tlsCa", "https://"),
        ({"kafka.sasl.jaas.config": JAAS}, "kafka.sasl.jaas.config", "SASL"),
        (
            {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.jaas.config": JAAS, "token": "t"},
            "token",
            "not both",
        ),
    ],
)
def test_unsound_settings_are_refused_without_quoting_secrets(
    options: dict[str, str], named: str, why: str
) -> None:
    with pytest.raises(InvalidAccessOption, match=why) as info:
        parse_access(options, "http://h:1")
    assert info.value.option == named
    assert "p@ss" not in str(info.value)


def test_the_source_and_the_sink_carry_the_credentials_and_the_ca(tmp_path: Path) -> None:
    ca = TestCA(tmp_path)
    source = parse_options({"endpoint": HTTPS, "topic": "t", "token": "t0k", "tlsCa": str(ca.ca_file)})
    assert (source.auth_token, source.tls_ca) == ("t0k", str(ca.ca_file))
    assert "t0k" not in repr(source)
    sink = parse_sink_options(
        {
            "endpoint": HTTPS,
            "topic": "t",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.jaas.config": JAAS,
        }
    )
    assert sink.auth_token is not None and sink.auth_token.startswith("Basic ")
    assert "alice" not in repr(sink)
    with pytest.raises(InvalidSourceOption, match="'tlsCa'"):
        parse_options({"endpoint": "http://h:1", "topic": "t", "tlsCa": str(ca.ca_file)})
    with pytest.raises(InvalidSinkOption, match=r"kafka\.security\.protocol"):
        parse_sink_options({"endpoint": "http://h:1", "topic": "t", "kafka.security.protocol": "SSL"})
