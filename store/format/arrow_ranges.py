"""Arrow arrays gathered from byte ranges of one buffer, and string columns kept as Arrow.

:func:`gather_ranges` turns ascending, disjoint ``(begin, length)`` ranges of one buffer (a
CommitLog slice, a blob of properties) into one contiguous Arrow binary/string array with a
single C++ ``take``: the ranges become the even elements of an array laid on the buffer.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from mmap import mmap
from typing import Final, overload

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from store.errors import InvalidArgument

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
#: One contiguous CommitLog slice.
SliceBytes = npt.NDArray[np.uint8] | memoryview | bytes | bytearray | mmap

#: Rows per NumPy pass: big enough to amortise Python overhead, small enough for L2/L3.
CHUNK_ROWS: Final = 1 << 15
#: Largest byte offset an Arrow binary/string array (int32 offsets) can hold.
_INT32_OFFSETS_LIMIT: Final = int(np.iinfo(np.int32).max)
#: Slices larger than this are gathered through large_binary/large_string (int64 offsets).
_LARGE_SOURCE_BYTES: Final = _INT32_OFFSETS_LIMIT


def as_bytes(buf: SliceBytes) -> U8:
    data = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    if data.dtype != np.uint8 or data.ndim != 1 or not data.flags.c_contiguous:
        raise InvalidArgument("buf must be one contiguous 1-D uint8 buffer")
    return data


def gather_ranges(source: pa.Buffer, begins: I64, lengths: I64, value_type: pa.DataType) -> pa.Array:
    """``source[begins[i] : begins[i] + lengths[i]]`` for every i, as one contiguous Arrow array.

    The ranges must be ascending and disjoint. They become the even elements of an array
    laid directly on ``source`` (odd elements are the gaps); Arrow's ``take`` copies them out.
    """
    count = len(begins)
    large = source.size > _LARGE_SOURCE_BYTES
    offsets = np.empty(2 * count + 1, dtype=np.int64 if large else np.int32)
    offsets[0:-1:2] = begins
    np.add(begins, lengths, out=offsets[1::2])
    offsets[-1] = offsets[-2] if count else 0
    base_type = (
        ({pa.binary(): pa.large_binary(), pa.string(): pa.large_string()}[value_type])
        if large
        else value_type
    )
    interleaved = pa.Array.from_buffers(base_type, 2 * count, [None, pa.py_buffer(offsets), source])
    picked = pc.take(interleaved, _even_numbers(count), boundscheck=False)
    return picked.cast(value_type) if large else picked


def _even_numbers(count: int) -> pa.Array:
    """``[0, 2, 4, ...]`` (``count`` of them), sliced from a cached power-of-two-sized array."""
    return _even_numbers_upto(max(1 << 10, 1 << (count - 1).bit_length())).slice(0, count)


@functools.lru_cache(maxsize=4)
def _even_numbers_upto(capacity: int) -> pa.Array:
    # A few sizes live at once (rows, pairs, key tokens); at most ~2x the largest batch's.
    # int32 indices (and no bounds check: they are in range by construction) take fastest.
    return pa.array(np.arange(0, 2 * capacity, 2, dtype=np.int32 if capacity <= 1 << 30 else np.int64))


def is_utf8(strings: pa.Array) -> bool:
    try:
        strings.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


class ArrowStrings(Sequence[str | None]):
    """A read-only sequence over an Arrow string array, so that columns of strings (generated
    UNIQ_KEYs, the UNIQ_KEY and KEYS columns of a CommitLog scan) pass from the encoder to the
    index without a Python string per value; a caller that iterates converts them once."""

    __slots__ = ("_peeked", "_values", "array")

    def __init__(self, array: pa.Array) -> None:
        self.array = array
        self._values: list[str | None] | None = None
        self._peeked = False

    def _list(self) -> list[str | None]:
        if self._values is None:
            self._values = self.array.to_pylist()
        return self._values

    def __len__(self) -> int:
        return len(self.array)

    @overload
    def __getitem__(self, index: int) -> str | None: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str | None, ...]: ...
    def __getitem__(self, index: int | slice) -> str | tuple[str | None, ...] | None:
        if isinstance(index, slice):
            return tuple(self._list()[index])
        if self._values is None and not self._peeked:  # one look (a template row): no conversion
            self._peeked = True
            value: str | None = self.array[index].as_py()
            return value
        return self._list()[index]

    def __contains__(self, value: object) -> bool:
        if value is None:
            return bool(self.array.null_count)
        return value in self._list()

    def fixed_width_ascii(self) -> tuple[bytes, int] | None:
        """(the values' bytes back to back, their width) when every value is present, ASCII
        and of one non-zero width; None otherwise."""
        count = len(self.array)
        if count == 0 or self.array.null_count or self.array.type != pa.string():
            return None
        offsets = np.frombuffer(self.array.buffers()[1], dtype=np.int32)[self.array.offset :][: count + 1]
        width = int(offsets[1] - offsets[0])
        if width == 0 or int(offsets[-1] - offsets[0]) != count * width:
            return None
        if not bool((np.diff(offsets) == width).all()):
            return None
        raw = bytes(self.array.buffers()[2])[int(offsets[0]) : int(offsets[-1])]
        return (raw, width) if raw.isascii() else None

    def __iter__(self) -> Iterator[str | None]:
        return iter(self._list())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ArrowStrings({self._list()!r})"
