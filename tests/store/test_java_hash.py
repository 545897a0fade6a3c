"""Java String.hashCode, scalar and vectorised (values checked against the JDK)."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from store.format.java_hash import index_key_hash, index_key_hashes, java_string_hash, java_string_hashes

# (text, "text".hashCode() as printed by a JVM)
JDK_VALUES = [
    ("", 0),
    ("a", 97),
    ("TagA", 2598919),
    ("hello world", 1794106052),
    ("polygenelubricants", -2147483648),  # Integer.MIN_VALUE: abs() stays negative
    ("é漢字😀", 1086978305),  # UTF-16 code units, the emoji is a surrogate pair
]


def test_scalar_matches_the_jdk() -> None:
    for text, expected in JDK_VALUES:
        assert java_string_hash(text) == expected
    assert index_key_hash("polygenelubricants") == 0
    assert index_key_hash("hello world") == 1794106052


@given(st.lists(st.text(max_size=40), max_size=60))
def test_vectorised_equals_scalar(texts: list[str]) -> None:
    assert java_string_hashes(texts).tolist() == [java_string_hash(t) for t in texts]
    assert index_key_hashes(texts).tolist() == [index_key_hash(t) for t in texts]


@given(st.lists(st.text(alphabet="abcXYZ#-_0123456789", max_size=40), min_size=3, max_size=60), st.data())
def test_arrow_input_and_sliced_arrays(texts: list[str], data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(texts) - 1))
    sliced = pa.array(texts).slice(start)
    assert java_string_hashes(sliced).tolist() == [java_string_hash(t) for t in texts[start:]]


def test_long_keys_and_mixed_lengths() -> None:
    """Keys past the precomputed powers of 31, beside short and empty ones, and a sharding key
    long enough to overflow 64-bit sums (the matrix product per length must wrap exactly like
    Java's int)."""
    texts = ["x" * 5000, "é" * 4097, "", "a", "ab", "k" * 4096, "漢字😀" * 700, "\uffff" * 40_000]
    assert java_string_hashes(texts).tolist() == [java_string_hash(t) for t in texts]
    assert index_key_hashes(texts).tolist() == [index_key_hash(t) for t in texts]
