"""Before/after in one run: a benchmark module run alternately on an earlier revision and on this tree.

    python -m bench.revisions --base e719ffc --rounds 3 -- bench.store_bench --messages 300000

The base revision is checked out into a temporary git worktree, and the module runs there
and here in turn (base, this tree, base, ...), each with ``PYTHONPATH`` set to its own tree and the
same interpreter and packages. Every figure line of the form ``  <label>   <number> <unit>``
(msg/s, MB/s, rows/s, req/s) is collected; the table gives each label's median on both sides
and the ratio this tree / base. The machine is shared and noisy, so only the ratio of
interleaved medians means much; a label one side does not print is shown with a dash.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURE = re.compile(
    r"^\s*(?P<label>\S.*?)\s{2,}(?P<value>[\d,]+(?:\.\d+)?)\s+(?P<unit>msg/s|MB/s|rows/s|req/s)\b"
)

Figures = dict[str, list[float]]


UNIT = re.compile(r"msg/s|MB/s|rows/s|req/s")
NUMBER = re.compile(r"^[\d,]+(?:\.\d+)?$")


def figures(output: str) -> dict[str, float]:
    """The figures of one run, ``label (unit)`` -> value: lines ``  <label>  <number> <unit>``,
    and tables whose header names columns with a unit (``client  produce msg/s  ...``): each
    row's first cell with each such column."""
    found: dict[str, float] = {}
    columns: list[str] = []
    for line in output.splitlines():
        match = FIGURE.match(line)
        if match:
            label = f"{match['label'].strip()} ({match['unit']})"
            found.setdefault(label, float(match["value"].replace(",", "")))
            continue
        cells = re.split(r"\s{2,}", line.strip())
        if sum(bool(UNIT.search(cell)) for cell in cells) >= 1 and not any(map(NUMBER.match, cells)):
            columns = cells
        elif columns and len(cells) == len(columns):
            for name, cell in zip(columns[1:], cells[1:], strict=True):
                if UNIT.search(name) and NUMBER.match(cell):
                    found.setdefault(f"{cells[0]} {name}", float(cell.replace(",", "")))
        else:
            columns = []
    return found


def run(tree: Path, module_args: list[str]) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-m", *module_args], cwd=tree, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"{' '.join(module_args)} failed in {tree} (exit {done.returncode})")
    return figures(done.stdout)


def table(base: Figures, here: Figures) -> list[str]:
    rows = [f"{'figure':<60} {'base':>14} {'this tree':>14} {'ratio':>7}"]
    for label in dict.fromkeys([*base, *here]):
        before = statistics.median(base[label]) if base.get(label) else None
        after = statistics.median(here[label]) if here.get(label) else None
        ratio = f"{after / before:.2f}" if before and after else "-"
        shown = [f"{value:,.0f}" if value else "-" for value in (before, after)]
        rows.append(f"{label:<60} {shown[0]:>14} {shown[1]:>14} {ratio:>7}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", required=True, help="the earlier revision (commit, tag or branch)")
    parser.add_argument("--rounds", type=int, default=3, help="runs on each side, interleaved")
    parser.add_argument("module", nargs=argparse.REMAINDER, help="-- bench.module [its arguments]")
    args = parser.parse_args()
    module_args = [a for a in args.module if a != "--"]
    if not module_args:
        parser.error("name the benchmark module after --")
    with tempfile.TemporaryDirectory(prefix="sparkmq-base-") as scratch:
        worktree = Path(scratch) / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "-q", str(worktree), args.base], cwd=ROOT, check=True
        )
        try:
            base: Figures = defaultdict(list)
            here: Figures = defaultdict(list)
            for round_number in range(1, args.rounds + 1):
                for side, tree in ((base, worktree), (here, ROOT)):
                    for label, value in run(tree, module_args).items():
                        side[label].append(value)
                print(f"round {round_number}/{args.rounds} done", file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=False)
    command = " ".join(module_args)
    print(f"{command}: base {args.base} against this tree, {args.rounds} interleaved rounds, medians")
    print("\n".join(table(base, here)))


if __name__ == "__main__":
    main()
