"""The ConsumeQueue unit: RocketMQ's 20-byte layout, its codecs and file naming (pure, no I/O).

One 20-byte big-endian unit per message; the unit's position is its *queue offset*::

    0                 8         12                20
    +-----------------+---------+-----------------+
    | commitlog offset|  size   |    tagsCode     |
    |     int64       |  int32  |      int64      |
    +-----------------+---------+-----------------+

``tagsCode`` is Java ``String.hashCode()`` of TAGS (0 without tags), or the deliver timestamp
in ms for ``SCHEDULE_TOPIC_XXXX``. A unit with ``offset < 0`` or ``size <= 0`` marks the end
of written data; RocketMQ's blank unit ``(0, Integer.MAX_VALUE, 0)`` fills the leading units of
a file whose queue starts past its boundary. Files are named by their 20-digit zero-padded
start *byte* offset (RocketMQ ``UtilAll.offset2FileName``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
Units = npt.NDArray[np.void]

CQ_UNIT = struct.Struct(
    ">"
    "q"  # commitlog offset: absolute byte offset of the record in the CommitLog
    "i"  # size: TOTALSIZE of the record
    "q"  # tagsCode: TAGS hashCode, or deliver timestamp (ms) for SCHEDULE_TOPIC_XXXX
)
CQ_UNIT_SIZE = CQ_UNIT.size  # 20
#: The same unit as a NumPy structured dtype (views straight over file bytes).
CQ_UNIT_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
#: Byte range of the ``size`` field inside a unit (the publication commit point).
SIZE_POS: int = CQ_UNIT_DTYPE.fields["size"][1]  # type: ignore[index]
SIZE_END = SIZE_POS + CQ_UNIT_DTYPE["size"].itemsize
#: RocketMQ ``fillPreBlank`` unit size (``Integer.MAX_VALUE``; offset 0, tagsCode 0).
BLANK_UNIT_SIZE = 0x7FFFFFFF


#: Samples per round of the k-ary searches (one ``store_ts_of`` call per round).
_SEARCH_FANOUT = 32

if CQ_UNIT_DTYPE.itemsize != CQ_UNIT_SIZE:  # pragma: no cover - layout defined twice, keep in sync
    raise ImportError("CQ_UNIT and CQ_UNIT_DTYPE disagree")


# Pure codecs ---------------------------------------------------------------------------------
def encode_unit(commitlog_offset: int, size: int, tags_code: int) -> bytes:
    return CQ_UNIT.pack(commitlog_offset, size, tags_code)


def decode_unit(data: bytes | memoryview, pos: int = 0) -> tuple[int, int, int]:
    """``(commitlog_offset, size, tags_code)`` of the unit at byte ``pos``."""
    offset, size, tags_code = CQ_UNIT.unpack_from(data, pos)
    return offset, size, tags_code


def encode_units(commitlog_offsets: I64, sizes: I32, tags_codes: I64) -> Units:
    """Columns -> contiguous structured array of units (``.tobytes()`` is the file image)."""
    units = np.empty(len(commitlog_offsets), dtype=CQ_UNIT_DTYPE)
    units["offset"] = commitlog_offsets
    units["size"] = sizes
    units["tags_code"] = tags_codes
    return units


def decode_units(data: bytes | memoryview) -> Units:
    """Zero-copy structured view over whole units."""
    return np.frombuffer(data, dtype=CQ_UNIT_DTYPE, count=len(data) // CQ_UNIT_SIZE)


def first_true(mask: npt.NDArray[np.bool_]) -> int | None:
    if len(mask) == 0:
        return None
    i = int(np.argmax(mask))
    return i if mask[i] else None


def end_marker(units: Units) -> npt.NDArray[np.bool_]:
    """Units that end written data (RocketMQ recover: ``offset < 0 || size <= 0``)."""
    return (units["offset"] < 0) | (units["size"] <= 0)  # type: ignore[no-any-return]


def leftmost(lo: int, hi: int, predicate: Callable[[I64], npt.NDArray[np.bool_]]) -> int:
    """First position in ``[lo, hi)`` where a monotone (False..True) predicate holds, else ``hi``.

    k-ary search: each round evaluates the predicate on up to ``_SEARCH_FANOUT`` positions.
    """
    while lo < hi:
        if hi - lo <= _SEARCH_FANOUT:
            positions = np.arange(lo, hi, dtype=np.int64)
        else:
            positions = np.unique(np.linspace(lo, hi - 1, _SEARCH_FANOUT).astype(np.int64))
        j = first_true(np.asarray(predicate(positions), dtype=bool))
        if j is None:
            lo = int(positions[-1]) + 1
        else:
            hi = int(positions[j])
            if j > 0:
                lo = int(positions[j - 1]) + 1
    return lo
