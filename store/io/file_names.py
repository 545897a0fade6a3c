"""Numbered file names, defined once: 20-digit zero-padded decimals (``UtilAll.offset2FileName``).

CommitLog files are named by their start offset, ConsumeQueue files by their start *byte*
offset, the sink's staged batches and the operators' decisions by their batch id:
``00000000001073741824``. Sorting the names sorts the numbers.
"""

from __future__ import annotations

from typing import Final

FILE_NAME_DIGITS: Final = 20


def offset_to_file_name(number: int) -> str:
    """``UtilAll.offset2FileName``: ``number`` as a 20-digit zero-padded decimal."""
    return f"{number:0{FILE_NAME_DIGITS}d}"


def file_name_to_offset(name: str) -> int | None:
    """The number a 20-digit name stands for, or None when ``name`` is not one."""
    if len(name) != FILE_NAME_DIGITS or not name.isdigit():
        return None
    return int(name)
