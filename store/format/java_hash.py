"""Java ``String.hashCode()``, scalar and vectorised.

RocketMQ uses it twice: the ConsumeQueue tagsCode is ``TAGS.hashCode()`` (a signed 32-bit
value widened to a long), and the IndexFile key hash is ``abs(key.hashCode())`` (0 when the
absolute value overflows). Java hashes UTF-16 code units: ``h = 31*h + c`` modulo 2**32.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa

_MASK = 0xFFFFFFFF
#: Up to this many strings are hashed one by one: the vectorised path's set-up (an Arrow array,
#: grouping by length, a matrix product per length) does not pay for a handful of strings.
SCALAR_STRINGS = 4


def java_string_hash(text: str) -> int:
    """``text.hashCode()`` as a signed 32-bit int."""
    h = 0
    if text.isascii():
        for ch in text.encode("ascii"):
            h = (31 * h + ch) & _MASK
    else:
        units = text.encode("utf-16-be")
        for i in range(0, len(units), 2):
            h = (31 * h + ((units[i] << 8) | units[i + 1])) & _MASK
    return h - (1 << 32) if h >= 1 << 31 else h


def index_key_hash(key: str) -> int:
    """IndexFile key hash: ``Math.abs(key.hashCode())``, 0 when it stays negative."""
    h = abs(java_string_hash(key))
    return 0 if h >= 1 << 31 else h


def java_string_hashes(texts: Sequence[str] | pa.Array) -> npt.NDArray[np.int32]:
    """Vectorised :func:`java_string_hash` over many strings (one pass of NumPy arithmetic).

    ``texts`` may be a Python sequence or an Arrow string array (no nulls)."""
    return _hashes_and_lengths(texts)[0]


def prefixed_index_key_hashes(
    prefixes: Sequence[str], prefix_of: npt.NDArray[np.integer], texts: Sequence[str] | pa.Array
) -> npt.NDArray[np.int32]:
    """``index_key_hashes(prefixes[prefix_of[i]] + texts[i])`` without building the strings.

    ``String.hashCode`` is a polynomial: ``h(p + t) = h(p) * 31**len(t) + h(t)`` (mod 2**32,
    ``len`` in UTF-16 units), so the index keys ``topic#key`` hash from their parts."""
    text_hashes, lengths = _hashes_and_lengths(texts)
    if len(text_hashes) == 0:
        return text_hashes
    prefix_hashes = np.array([java_string_hash(p) for p in prefixes], dtype=np.int64).astype(np.uint64)
    powers = _powers_of_31(int(lengths.max()))
    combined = prefix_hashes[prefix_of] * powers[lengths] + text_hashes.view(np.uint32)
    return _index_key_rule(_java_int(combined))


def _hashes_and_lengths(
    texts: Sequence[str] | pa.Array,
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64]]:
    """(Java hashes, lengths in UTF-16 code units) of the strings."""
    n = len(texts)
    if n == 0:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
    if n <= SCALAR_STRINGS:
        values: list[str] = texts.to_pylist() if isinstance(texts, pa.Array) else list(texts)
        return (
            np.array([java_string_hash(t) for t in values], dtype=np.int32),
            np.array([len(t.encode("utf-16-le")) // 2 for t in values], dtype=np.int64),
        )
    if not isinstance(texts, pa.Array):
        joined = "".join(texts)
        if joined.isascii():  # the common case (UNIQ_KEYs, ids): the bytes are the code units
            lengths = np.fromiter(map(len, texts), dtype=np.int64, count=n)
            return _hash_code_units(np.frombuffer(joined.encode("ascii"), dtype=np.uint8), lengths), lengths
    array = texts if isinstance(texts, pa.Array) else pa.array(texts, type=pa.string())
    if array.type == pa.string():
        offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=n + 1 + array.offset)[
            array.offset :
        ]
        data = array.buffers()[2]
        raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
        codes: npt.NDArray[np.unsignedinteger] = raw[offsets[0] : offsets[-1]]
        if len(codes) == 0 or int(codes.max()) < 0x80:  # ASCII: the UTF-8 bytes are the code units
            lengths = np.diff(offsets).astype(np.int64)
            return _hash_code_units(codes, lengths), lengths
    values = array.to_pylist()
    codes = np.frombuffer("".join(values).encode("utf-16-be"), dtype=">u2").astype(np.uint32)
    lengths = np.fromiter((len(t.encode("utf-16-be")) // 2 for t in values), dtype=np.int64, count=n)
    return _hash_code_units(codes, lengths), lengths


def _hash_code_units(
    codes: npt.NDArray[np.unsignedinteger], lengths: npt.NDArray[np.int64]
) -> npt.NDArray[np.int32]:
    """Hashes of consecutive strings given as UTF-16 code units and per-string lengths.

    ``h = sum(c[j] * 31**(L-1-j))`` modulo 2**32. Strings are grouped by length; each group is
    an (n, L) matrix multiplied by the powers of 31 (mod 2**32) in uint64, whose arithmetic
    wraps modulo 2**64 and so keeps every sum exact modulo 2**32 at any length: one matrix
    product per length does what ``L`` passes of ``h = 31 * h + c`` did, two to three times
    faster below 10,000 strings.
    """
    n = len(lengths)
    result = np.zeros(n, dtype=np.uint64)
    longest = int(lengths.max()) if n else 0
    if longest == 0:
        return _java_int(result)
    powers = _powers_of_31(longest)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    distinct = np.unique(lengths).tolist()
    for length in distinct:
        if length == 0:
            continue
        weights = powers[length - 1 :: -1]  # 31**(L-1), ..., 31**0
        if len(distinct) == 1:  # one length: the codes already form the matrix
            result[:] = codes[: n * length].reshape(n, length).astype(np.uint64) @ weights
            continue
        rows = np.flatnonzero(lengths == length)
        matrix = codes[starts[rows][:, None] + np.arange(length, dtype=np.int64)]
        result[rows] = matrix.astype(np.uint64) @ weights
    return _java_int(result)


def _java_int(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.int32]:
    """uint64 sums reduced modulo 2**32 and read as Java's signed int."""
    return (values & np.uint64(_MASK)).astype(np.uint32).view(np.int32)


def _computed_powers(count: int) -> npt.NDArray[np.uint64]:
    """``31**i`` for ``i`` in ``[0, count]`` modulo 2**32 (uint32 products wrap like Java's
    int), widened to uint64 for the products they weight."""
    powers = np.ones(count + 1, dtype=np.uint32)
    np.cumprod(np.full(count, 31, dtype=np.uint32), out=powers[1:])
    return powers.astype(np.uint64)


#: The powers for keys up to 4,096 UTF-16 units, computed once.
_POWERS = _computed_powers(4096)


def _powers_of_31(count: int) -> npt.NDArray[np.uint64]:
    """:func:`_computed_powers`, from the precomputed table when it is long enough."""
    return _POWERS[: count + 1] if count < len(_POWERS) else _computed_powers(count)


def index_key_hashes(keys: Sequence[str] | pa.Array) -> npt.NDArray[np.int32]:
    """Vectorised :func:`index_key_hash`."""
    return _index_key_rule(java_string_hashes(keys))


def _index_key_rule(hashes: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    """``Math.abs(hashCode)``, 0 when it stays negative (Integer.MIN_VALUE)."""
    h = np.abs(hashes.astype(np.int64))
    h[h >= 1 << 31] = 0
    return h.astype(np.int32)
