"""A read-only follower gives back the pages its reads mapped (``StoreReader.release_pages``).

Spark keeps its Python workers between batches, and each one keeps its ``StoreReader``: before,
every CommitLog page a worker had read stayed mapped in it, so its RSS grew with what it read
(150 MB per worker at a million delayed messages). The page cache keeps the pages either way.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa

from store import MessageStore, StoreConfig, StoreReader
from store.io.fs import OsFileSystem

BODY = 1000
COUNT = 20_000  # 20 MB of bodies


def mapped_rss_kb(directory: Path, read_only: bool = True) -> int:
    """Resident kB of this process's mappings of files under ``directory``: its read-only ones
    (a reader's; a broker in the same process maps the same files writable), or all of them."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            fields = line.split()
            inside = len(fields) > 5 and fields[5].startswith(str(directory))
            inside = inside and not (read_only and "w" in fields[1])
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def read_all(reader: StoreReader) -> pa.Table:
    batches, offset = [], 0
    while offset < COUNT:
        result = reader.read_batch("t", 0, offset, 5000)
        batches.append(result.batch)
        offset = result.next_offset
    return pa.Table.from_batches(batches)


def test_a_follower_unmaps_what_it_read_and_reads_the_same_bytes_after(tmp_path: Path) -> None:
    config = StoreConfig(store_dir=tmp_path / "s", background_services=False)
    bodies = [i.to_bytes(4, "big") * (BODY // 4) for i in range(COUNT)]
    with MessageStore.open(config) as store:
        store.create_topic("t", 1)
        for lo in range(0, COUNT, 1000):
            store.put_batch("t", bodies[lo : lo + 1000])
        store.flush()

    reader = StoreReader(config.store_dir)
    try:
        first = read_all(reader)
        assert first.column("body").to_pylist() == bodies
        store_dir = Path(config.store_dir).resolve()
        assert mapped_rss_kb(store_dir) > COUNT * BODY // 1024 // 2  # the reads mapped the CommitLog

        reader.release_pages()

        assert mapped_rss_kb(store_dir) < 64  # nothing of it left resident in this process
        # Results of the earlier read stay valid, and a new read sees the same bytes.
        assert first.column("body").to_pylist() == bodies
        assert read_all(reader).column("body").to_pylist() == bodies
    finally:
        reader.close()


def test_a_writers_mapping_keeps_its_pages(tmp_path: Path) -> None:
    """Only read-only mappings let go (a writer stores through some of its own)."""
    fs = OsFileSystem()
    for read_only in (False, True):
        path = tmp_path / f"f-{read_only}"
        fs.create(path, 4 << 20).close()
        handle = fs.open(path, read_only=read_only)
        try:
            if not read_only:
                handle.reserve(4 << 20)
                handle.write(0, b"y" * (4 << 20))
            assert bytes(handle.view(0, 4 << 20)).count(b"y" if not read_only else b"\0") == 4 << 20
            before = mapped_rss_kb(path, read_only=False)
            handle.release_pages()
            after = mapped_rss_kb(path, read_only=False)
            assert before >= 4096 - 64
            assert (after >= before - 64) if not read_only else (after < 64)
        finally:
            handle.close()
