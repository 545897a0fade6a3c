"""``sparkmq store inspect|verify|rebuild-index``: offline tools on a store directory.

They open the store themselves, so they refuse (exit 6) a directory another process holds
(the store's ``lock`` file, as a running broker does); a missing directory exits 3.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from sparkmq.cli.common import Exit, Output, OutputOption, emit, fail
from sparkmq.cli.root import store_app
from store import MessageStore, StoreLocked, existing_config

StoreDir = Annotated[
    Path, typer.Argument(help="The store directory (as given to sparkmq serve --store-dir).")
]


@contextmanager
def opened(store_dir: Path) -> Iterator[MessageStore]:
    if not (store_dir / "commitlog").is_dir():
        fail(f"{store_dir} is not a sparkmq store (no commitlog/ folder)", Exit.NOT_FOUND)
    try:
        store = MessageStore.open(existing_config(store_dir))
    except StoreLocked as exc:
        fail(f"{store_dir} is in use by another process (stop the broker first): {exc}", Exit.STORE_IN_USE)
    try:
        yield store
    finally:
        store.close()


@store_app.command("inspect")
def inspect(store_dir: StoreDir, output: OutputOption = Output.table) -> None:
    """Topics with their queues' offsets, groups, CommitLog range and files."""
    with opened(store_dir) as store:
        stats = store.stats()
        topics: list[dict[str, Any]] = []
        for name, _ in sorted(store.topics().items()):
            for queue_id, (low, high) in sorted(store.queue_offsets(name).items()):
                topics.append({"topic": name, "queue_id": queue_id, "min_offset": low, "max_offset": high})
        groups = store.groups()
    files = sorted(p.name for p in (store_dir / "commitlog").iterdir() if p.name.isdigit())
    report = {
        "store_dir": str(store_dir),
        "commitlog_min_offset": stats.commitlog_min_offset,
        "commitlog_max_offset": stats.commitlog_max_offset,
        "commitlog_files": files,
        "queues": topics,
        "groups": groups,
    }
    if output is Output.json:
        emit(output, report)
        return
    typer.echo(
        f"{store_dir}: CommitLog [{stats.commitlog_min_offset}, {stats.commitlog_max_offset}) "
        f"in {len(files)} file(s); {len({t['topic'] for t in topics})} topic(s), {len(groups)} group(s)"
    )
    emit(output, report, rows=topics, columns=("topic", "queue_id", "min_offset", "max_offset"))


@store_app.command("verify")
def verify(
    store_dir: StoreDir,
    crc: Annotated[bool, typer.Option(help="Check every body CRC too.")] = True,
    output: OutputOption = Output.table,
) -> None:
    """Walk every CommitLog record; exit 7 when the walk stops before the end (damage)."""
    with opened(store_dir) as store:
        found = store.verify(check_crc=crc)
    report = {
        "ok": found.ok, "records": found.records, "first_offset": found.first_offset,
        "valid_end_offset": found.valid_end_offset, "max_offset": found.max_offset,
    }  # fmt: skip
    if output is Output.json:
        emit(output, report)
    elif found.ok:
        typer.echo(f"ok: {found.records} records in [{found.first_offset}, {found.max_offset})")
    else:
        end, stop = found.max_offset, found.valid_end_offset
        typer.echo(f"damaged: records stop at offset {stop}, the CommitLog ends at {end}")
    if not found.ok:
        raise typer.Exit(int(Exit.STORE_DAMAGED))


@store_app.command("rebuild-index")
def rebuild_index(store_dir: StoreDir, output: OutputOption = Output.table) -> None:
    """Rebuild every ConsumeQueue and the key index from the CommitLog."""
    with opened(store_dir) as store:
        replayed = store.rebuild_indexes()
    emit(output, {"records": replayed}, columns=("records",))
