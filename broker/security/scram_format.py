"""SCRAM (RFC 5802, RFC 7677) messages and keys: pure functions, no state, no I/O.

The four messages, as Kafka's ``ScramMessages`` parses them (``[...]`` optional)::

    client-first  = gs2-header client-first-bare
    gs2-header    = "n," [ "a=" saslname ] ","              (only "n": no channel binding)
    client-first-bare = "n=" saslname ",r=" c-nonce
    server-first  = "r=" c-nonce s-nonce ",s=" base64(salt) ",i=" iterations
    client-final  = "c=" base64(gs2-header) ",r=" c-nonce s-nonce ",p=" base64(ClientProof)
    server-final  = "v=" base64(ServerSignature)   |   "e=" server-error-value

``saslname`` escapes ``,`` as ``=2C`` and ``=`` as ``=3D``; any other ``=`` is malformed. A
nonce is printable ASCII (0x21-0x7E) without ``,``. Extensions (attributes after the ones
above, and the reserved ``m=``) are refused: no client this broker serves sends any.

The keys (H = SHA-256 or SHA-512, HMAC over H)::

    SaltedPassword = PBKDF2-HMAC-H(utf8(password), salt, iterations)   # no SASLprep, as Kafka
    ClientKey = HMAC(SaltedPassword, "Client Key")    StoredKey = H(ClientKey)
    ServerKey = HMAC(SaltedPassword, "Server Key")
    AuthMessage = client-first-bare "," server-first "," client-final-without-proof
    ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage)
    ServerSignature = HMAC(ServerKey, AuthMessage)

The stored form is Kafka's ``ScramCredentialUtils`` text:
``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import enum
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field

from broker.security.errors import InvalidUsersFile, MalformedSaslMessage

#: Kafka's ``ScramMechanism`` bounds on the stored iteration count.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
#: What ``sparkmq auth add-user`` writes (and what the mock salt of an unknown user claims).
DEFAULT_ITERATIONS = 4096
#: Random salt length of new credentials (the RFC 7677 vector's salt is 16 bytes too).
SALT_BYTES = 16
#: Longest SCRAM message accepted (a real one is under 300 bytes).
MAX_MESSAGE_BYTES = 4096
#: Longest user name, in UTF-8 bytes (RFC 4616's floor for PLAIN, kept for SCRAM too).
MAX_NAME_BYTES = 255

_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")
_BAD_ESCAPE = re.compile(r"=(?!2C|3D)")


class ScramMechanism(enum.Enum):
    """The two SCRAM mechanisms, by their SASL names; ``hash_name`` is hashlib's."""

    SHA_256 = "SCRAM-SHA-256"
    SHA_512 = "SCRAM-SHA-512"

    @property
    def hash_name(self) -> str:
        return "sha256" if self is ScramMechanism.SHA_256 else "sha512"

    @property
    def digest_size(self) -> int:
        return 32 if self is ScramMechanism.SHA_256 else 64

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash_name).digest()

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server keeps for one user and mechanism: never the password.

    ``repr`` shows only the iteration count; the keys are secrets (StoredKey lets one forge
    nothing, but ServerKey lets one impersonate the server to the user).
    """

    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def to_kafka(self) -> str:
        """Kafka's stored text: ``salt=..,stored_key=..,server_key=..,iterations=n``."""
        b64 = _b64encode
        return (
            f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},"
            f"server_key={b64(self.server_key)},iterations={self.iterations}"
        )

    @classmethod
    def from_kafka(cls, text: str, mechanism: ScramMechanism, where: str) -> ScramCredential:
        """Parse Kafka's stored text; :class:`InvalidUsersFile` names ``where``, never values."""
        fields: dict[str, str] = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep or key in fields:
                raise InvalidUsersFile(f"{where}: expected salt=..,stored_key=..,server_key=..,iterations=n")
            fields[key] = value
        if set(fields) != {"salt", "stored_key", "server_key", "iterations"}:
            raise InvalidUsersFile(f"{where}: needs exactly salt, stored_key, server_key and iterations")
        try:
            salt, stored, server = (_b64decode(fields[k]) for k in ("salt", "stored_key", "server_key"))
        except MalformedSaslMessage:
            raise InvalidUsersFile(f"{where}: salt, stored_key and server_key must be base64") from None
        if not fields["iterations"].isdigit():
            raise InvalidUsersFile(f"{where}: iterations must be a number")
        iterations = int(fields["iterations"])
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise InvalidUsersFile(f"{where}: iterations must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
        if len(stored) != mechanism.digest_size or len(server) != mechanism.digest_size or not salt:
            raise InvalidUsersFile(f"{where}: key sizes do not match {mechanism.value}")
        return cls(salt, stored, server, iterations)


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """PBKDF2-HMAC-H of the UTF-8 password (no SASLprep, as Kafka and kafka-python)."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def client_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return mechanism.hmac(salted, b"Client Key")


def credential_from_salted(
    mechanism: ScramMechanism, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    stored_key = mechanism.hash(client_key(mechanism, salted))
    server_key = mechanism.hmac(salted, b"Server Key")
    return ScramCredential(salt, stored_key, server_key, iterations)


def make_credential(
    mechanism: ScramMechanism,
    password: str,
    *,
    salt: bytes | None = None,
    iterations: int = DEFAULT_ITERATIONS,
) -> ScramCredential:
    """A new stored credential (a random salt unless one is given). Raises ``ValueError`` for
    an empty password or an iteration count outside Kafka's bounds."""
    if not password:
        raise ValueError("a SCRAM password must not be empty")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted(mechanism, salted, salt, iterations)


def mock_credential(
    mechanism: ScramMechanism, secret: bytes, username: str, iterations: int = DEFAULT_ITERATIONS
) -> ScramCredential:
    """A credential for a user who does not exist: the same salt every time for that name
    (HMAC of the server's secret), ``iterations`` (give the count real users have), and keys
    no password derives. Its server-first looks like a real user's (PostgreSQL's
    ``scram_mock_salt``)."""
    label = f"{mechanism.value}\0{username}".encode()
    salt = mechanism.hmac(secret, b"salt\0" + label)[:SALT_BYTES]
    stored = mechanism.hmac(secret, b"stored\0" + label)
    server = mechanism.hmac(secret, b"server\0" + label)
    return ScramCredential(salt, stored, server, iterations)


def xor(left: bytes, right: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(left, right, strict=True))


# --- messages ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientFirst:
    """A parsed client-first message; ``bare`` is client-first-bare as sent (for AuthMessage)."""

    gs2_header: str
    authzid: str
    username: str
    nonce: str
    bare: str


@dataclass(frozen=True, slots=True)
class ServerFirst:
    nonce: str
    salt: bytes = field(repr=False)
    iterations: int
    text: str


@dataclass(frozen=True, slots=True)
class ClientFinal:
    """A parsed client-final; ``without_proof`` is the text before ``,p=`` (for AuthMessage)."""

    channel_binding: str
    nonce: str
    proof: bytes = field(repr=False)
    without_proof: str


def escape_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_saslname(text: str, what: str) -> str:
    """Undo ``=2C``/``=3D``; any other ``=`` (or an empty name) is malformed."""
    if not text or _BAD_ESCAPE.search(text):
        raise MalformedSaslMessage(f"{what}: invalid saslname (empty, or '=' not followed by 2C or 3D)")
    name = text.replace("=2C", ",").replace("=3D", "=")
    if len(name.encode("utf-8")) > MAX_NAME_BYTES or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise MalformedSaslMessage(f"{what}: invalid saslname (too long or control characters)")
    return name


def decode_message(data: bytes, what: str) -> str:
    if len(data) > MAX_MESSAGE_BYTES:
        raise MalformedSaslMessage(f"{what}: longer than {MAX_MESSAGE_BYTES} bytes")
    text = _utf8(data)
    if text is None:  # raised outside the except: the error keeps no link to the bytes
        raise MalformedSaslMessage(f"{what}: not UTF-8")
    return text


def _utf8(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _attributes(text: str, names: tuple[str, ...], what: str) -> list[str]:
    """The values of exactly the attributes ``names``, in that order; nothing else allowed."""
    parts = text.split(",")
    if len(parts) != len(names):
        raise MalformedSaslMessage(f"{what}: expected attributes {','.join(names)} (no extensions)")
    values = []
    for part, name in zip(parts, names, strict=True):
        if not part.startswith(name + "="):
            raise MalformedSaslMessage(f"{what}: expected attribute '{name}=' in its place")
        values.append(part[len(name) + 1 :])
    return values


def _check_nonce(nonce: str, what: str) -> str:
    if not _NONCE.fullmatch(nonce):
        raise MalformedSaslMessage(f"{what}: nonce must be printable ASCII without ','")
    return nonce


def parse_client_first(data: bytes) -> ClientFirst:
    """Parse client-first; :class:`MalformedSaslMessage` names the broken rule."""
    what = "SCRAM client-first"
    text = decode_message(data, what)
    flag, sep, rest = text.partition(",")
    if not sep or flag != "n":
        raise MalformedSaslMessage(f"{what}: gs2 header must start with 'n,' (no channel binding)")
    authz_part, sep, bare = rest.partition(",")
    if not sep:
        raise MalformedSaslMessage(f"{what}: truncated gs2 header")
    authzid = ""
    if authz_part:
        if not authz_part.startswith("a="):
            raise MalformedSaslMessage(f"{what}: gs2 header authzid must be 'a=saslname'")
        authzid = unescape_saslname(authz_part[2:], what)
    raw_name, nonce = _attributes(bare, ("n", "r"), what)
    username = unescape_saslname(raw_name, what)
    if authzid and authzid != username:
        raise MalformedSaslMessage(f"{what}: authzid differs from the user name")
    return ClientFirst(f"n,{authz_part},", authzid, username, _check_nonce(nonce, what), bare)


def format_client_first(username: str, nonce: str, authzid: str = "") -> str:
    authz = f"a={escape_saslname(authzid)}" if authzid else ""
    return f"n,{authz},n={escape_saslname(username)},r={nonce}"


def format_server_first(nonce: str, salt: bytes, iterations: int) -> str:
    return f"r={nonce},s={_b64encode(salt)},i={iterations}"


def parse_server_first(data: bytes) -> ServerFirst:
    what = "SCRAM server-first"
    text = decode_message(data, what)
    nonce, salt_b64, iterations = _attributes(text, ("r", "s", "i"), what)
    if not iterations.isdigit():
        raise MalformedSaslMessage(f"{what}: iteration count is not a number")
    salt = _b64decode(salt_b64, what)
    return ServerFirst(_check_nonce(nonce, what), salt, int(iterations), text)


def format_client_final(gs2_header: str, nonce: str, proof: bytes) -> tuple[str, str]:
    """(client-final-without-proof, client-final)."""
    without = f"c={_b64encode(gs2_header.encode())},r={nonce}"
    return without, f"{without},p={_b64encode(proof)}"


def parse_client_final(data: bytes, mechanism: ScramMechanism) -> ClientFinal:
    what = "SCRAM client-final"
    text = decode_message(data, what)
    channel_binding, nonce, proof_b64 = _attributes(text, ("c", "r", "p"), what)
    proof = _b64decode(proof_b64, what)
    if len(proof) != mechanism.digest_size:
        raise MalformedSaslMessage(f"{what}: proof is not {mechanism.digest_size} bytes")
    without = text[: text.rindex(",p=")]
    return ClientFinal(channel_binding, _check_nonce(nonce, what), proof, without)


def parse_server_final(data: bytes) -> tuple[bytes | None, str | None]:
    """(server signature, None) or (None, server-error-value)."""
    what = "SCRAM server-final"
    text = decode_message(data, what)
    if text.startswith("e="):
        return None, text[2:]
    (signature,) = _attributes(text, ("v",), what)
    return _b64decode(signature, what), None


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: str, what: str = "base64 field") -> bytes:
    """Strict base64; the error is raised outside the ``except`` so it links to no secret."""
    decoded: bytes | None = None
    with contextlib.suppress(binascii.Error, UnicodeEncodeError, ValueError):
        decoded = base64.b64decode(text.encode("ascii"), validate=True)
    if decoded is None:
        raise MalformedSaslMessage(f"{what}: invalid base64")
    return decoded
