"""What the Spark source costs each query's streaming source runner, a Python process that
imports ``streaming.datasource`` and lives as long as its query: pandas is not among it.

pyarrow imports pandas (44 MB) whenever it is installed and is handed a Python object to convert
(``pa.array`` of a list, ``pa.scalar``, ``RecordBatch.from_pylist``). A module-level constant
built that way put pandas in every runner of the operator job's three queries."""

from __future__ import annotations

import subprocess
import sys

#: Modules the runner needs not: pandas (pyarrow imports it), httpx (a store directory is read directly).
HEAVY = ("pandas", "httpx")


def loaded_after(module: str) -> list[str]:
    code = (
        "import sys, importlib\n"
        f"importlib.import_module({module!r})\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return [m for m in done.stdout.strip().split(",") if m]


def test_the_spark_source_does_not_import_pandas() -> None:
    assert loaded_after("streaming.datasource") == []


def test_the_store_does_not_import_pandas() -> None:
    # the broker and the store library do not need it either (Arrow alone)
    assert loaded_after("store") == []
