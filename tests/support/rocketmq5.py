"""RocketMQ 5's official Python client (PyPI ``rocketmq-python-client``) in a venv of its own.

Its top-level package ``rocketmq`` clashes with other PyPI packages, and it pulls in
opentelemetry and its own grpcio/protobuf, so it never enters the project's venv. The first
test that needs it builds ``.venv-rocketmq5/`` in the repository root (gitignored) with the
pinned version; later runs reuse it, and a change of :data:`PINNED` (or of the interpreter)
rebuilds it. Building takes a minute and needs PyPI, like the rest of ``make test``.

Client programs are scripts under ``tests/grpc/clients/``: each takes one JSON argument and
prints one JSON object per line on stdout (other lines are ignored); :func:`run_client` runs
one and returns those objects, or raises :class:`ClientFailed` with its exit code and stderr.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VENV_DIR = ROOT / ".venv-rocketmq5"
CLIENTS_DIR = ROOT / "tests" / "grpc" / "clients"
#: The official client the gRPC door is tested with (its wire behaviour is described in
#: shared/reference/rocketmq-clients.md, section 1a).
PINNED = "rocketmq-python-client==5.1.2"
#: Written last into the venv: what it was built with (a venv without it is half-built).
MARKER = VENV_DIR / ".pinned"
#: What the marker must say: the pin and the interpreter the venv was made from.
BUILT_WITH = f"{PINNED} on {sys.executable} {sys.version.split()[0]}"
#: Within pytest's 600 s per-test timeout (pip takes about a minute here).
BUILD_TIMEOUT_S = 480


class ClientFailed(AssertionError):
    """A client script exited non-zero (its stderr is in the message)."""


def venv_python() -> Path:
    """The client venv's interpreter, building the venv first when it is missing or stale.

    Several test processes may ask at once: a file lock makes one build and the others wait.
    Raises :class:`subprocess.CalledProcessError` when ``venv`` or ``pip`` fails.
    """
    python = VENV_DIR / "bin" / "python"
    if _is_current():
        return python
    VENV_DIR.parent.mkdir(parents=True, exist_ok=True)
    with open(ROOT / ".venv-rocketmq5.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _is_current():
            _build(python)
    return python


def _is_current() -> bool:
    try:
        return MARKER.read_text() == BUILT_WITH and (VENV_DIR / "bin" / "python").exists()
    except FileNotFoundError:
        return False


def _build(python: Path) -> None:
    MARKER.unlink(missing_ok=True)
    # --clear: a stale venv (another pin, or a build that died) starts over.
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV_DIR)], check=True, timeout=120)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", PINNED],
        check=True,
        timeout=BUILD_TIMEOUT_S,
        env=_clean_env(VENV_DIR),
    )
    MARKER.write_text(BUILT_WITH)


def _clean_env(home: Path) -> dict[str, str]:
    """The environment for the venv's processes: no PYTHONPATH (the project's packages stay
    out) and ``HOME`` where the client writes its log (``~/logs/rocketmq_python/``)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["HOME"] = str(home)
    return env


def run_client(
    script: str,
    argument: dict[str, Any],
    home: Path,
    timeout_s: float = 120,
    env: Mapping[str, str] | None = None,
) -> list[Any]:
    """Run ``tests/grpc/clients/<script>`` in the client venv with ``argument`` as JSON.

    ``home`` becomes the script's ``HOME`` (the client's log lands in
    ``home/logs/rocketmq_python/``); ``env`` adds variables (e.g. gRPC's
    ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``). Returns the JSON objects it printed, in order.
    """
    python = venv_python()
    home.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [str(python), str(CLIENTS_DIR / script), json.dumps(argument)],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout_s,
        env={**_clean_env(home), **(env or {})},
        cwd=home,
    )
    if done.returncode != 0:
        raise ClientFailed(f"{script} exited with {done.returncode}:\n{done.stderr[-4000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
