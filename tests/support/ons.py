"""The real RocketMQ remoting client for the door tests: ali-ons (npm, pure JavaScript).

``tests/remoting/js`` pins ali-ons 3.12.0 with a lockfile; :func:`ensure_ali_ons` runs
``npm ci`` there once: not again while ``node_modules`` is current (npm's own record of what it
installed, ``node_modules/.package-lock.json``, lists the lockfile's packages), so an install
by ``.ci/run`` counts too; a file lock keeps parallel test processes from installing twice.
The drivers take their options as one JSON argument and print JSON lines:

* :func:`run_producer` sends messages and returns one dict per send result;
* :func:`start_consumer` starts a push consumer and returns an :class:`OnsConsumer` whose
  lines (one per received message, one per rebalance) are read in a background thread.

Without ``node`` and ``npm`` on the PATH the tests are skipped with the reason (``.ci/run``
installs Debian's ``nodejs`` and ``npm``).
"""

from __future__ import annotations

import fcntl
import json
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

JS_DIR = Path(__file__).resolve().parents[1] / "remoting" / "js"
_INSTALLED = JS_DIR / "node_modules" / ".package-lock.json"
_LOCK = JS_DIR / ".npm-install.lock"
_INSTALL_TIMEOUT_S = 300


def ensure_ali_ons() -> Path:
    """``tests/remoting/js`` with its lockfile's packages installed; skips without node/npm."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for the ali-ons tests (apt-get install nodejs npm)")
    with _LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _installed_is_current():
            subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=JS_DIR,
                check=True,
                timeout=_INSTALL_TIMEOUT_S,
            )
    return JS_DIR


def _installed_is_current() -> bool:
    """npm's record of the installed tree lists exactly the lockfile's packages."""
    if not _INSTALLED.exists():
        return False
    wanted: dict[str, Any] = json.loads((JS_DIR / "package-lock.json").read_text())["packages"]
    wanted.pop("", None)  # the root project itself
    installed: dict[str, Any] = json.loads(_INSTALLED.read_text()).get("packages", {})
    return bool(installed == wanted)


def _command(script: str, options: dict[str, Any]) -> list[str]:
    node = shutil.which("node")
    assert node is not None
    return [node, str(ensure_ali_ons() / script), json.dumps(options)]


def run_producer(
    name_srv: str,
    topic: str,
    messages: list[dict[str, Any]],
    *,
    producer_group: str = "sparkmq_test_producer",
    timeout_s: float = 60.0,
    **extra: Any,
) -> list[dict[str, Any]]:
    """Send ``messages`` (dicts of body, tags, keys, delayTimeLevel, properties) with an ali-ons
    Producer; returns the ``sent`` lines in order. Raises ``AssertionError`` with the
    driver's output when it fails."""
    options = {"nameSrv": name_srv, "topic": topic, "producerGroup": producer_group, "messages": messages}
    done = subprocess.run(
        _command("producer.js", {**options, **extra}),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines or lines[-1].get("event") != "done":
        raise AssertionError(
            f"ali-ons producer exited {done.returncode}\nstdout:\n{done.stdout}\n"
            f"stderr:\n{done.stderr[-4000:]}"
        )
    return [line for line in lines if line["event"] == "sent"]


class OnsConsumer:
    """A running ali-ons push consumer. A background thread reads its JSON lines: every line
    goes to :attr:`events`; messages are also appended to :attr:`received` and the latest
    ``queues`` report (the queue ids a rebalance gave it) is kept in :attr:`queues`."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.received: list[dict[str, Any]] = []
        self.queues: list[int] | None = None
        self._process = subprocess.Popen(
            _command("consumer.js", options),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._stderr: list[str] = []
        self._threads = [
            threading.Thread(target=self._pump_stdout, daemon=True),
            threading.Thread(target=self._pump_stderr, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _pump_stdout(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            if event.get("event") == "message":
                self.received.append(event)
            elif event.get("event") == "queues":
                self.queues = list(event["queues"])
            self.events.put(event)

    def _pump_stderr(self) -> None:
        assert self._process.stderr is not None
        self._stderr.extend(self._process.stderr)

    def wait_for(self, kind: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """The next event of ``kind`` (others are skipped); ``AssertionError`` with the driver's
        stderr on timeout, or when the driver reports an error or its own timeout first."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                event = self.events.get(timeout=max(0.05, deadline - time.monotonic()))
            except queue.Empty:
                message = f"no {kind!r} from the consumer in {timeout_s}s; stderr:\n{self.stderr[-4000:]}"
                raise AssertionError(message) from None
            if event.get("event") == kind:
                return event
            if event.get("event") in ("timeout", "error"):
                raise AssertionError(f"consumer ended with {event}; stderr:\n{self.stderr[-4000:]}")

    def wait_ready(self, timeout_s: float = 30.0) -> dict[str, Any]:
        return self.wait_for("ready", timeout_s)

    def wait_done(self, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Every message received, once the driver consumed its ``expect`` count."""
        self.wait_for("done", timeout_s)
        return list(self.received)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Terminate the driver (SIGTERM, then SIGKILL) and wait for it."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout_s)
        for thread in self._threads:
            thread.join(timeout_s)


def start_consumer(
    name_srv: str, group: str, topic: str, *, sub_expression: str = "*", **extra: Any
) -> OnsConsumer:
    """Start a push consumer of ``group`` on ``topic`` (options: instanceName, fail, expect,
    timeoutMs, consumeFromWhere, clientOptions; see ``tests/remoting/js/consumer.js``)."""
    options = {
        "nameSrv": name_srv,
        "consumerGroup": group,
        "topic": topic,
        "subExpression": sub_expression,
        **extra,
    }
    return OnsConsumer(options)
