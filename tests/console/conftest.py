"""A real broker with real data (auth on) and a real headless Chromium driven by Playwright.

The browser is Debian's ``chromium`` package (``.ci/run`` installs it), launched through
Playwright's ``executable_path``: ``playwright install`` downloads browsers and cannot work
here. Every request not to 127.0.0.1 is aborted, which proves the console needs no network.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route, sync_playwright

from broker.config import ServerConfig
from tests.ingest.conftest import RunningBroker, start_broker
from tests.support.stores import light_config

CHROMIUM = os.environ.get("SPARKMQ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
ADMIN_TOKEN = "admin-token-123"
READER_TOKEN = "reader-token-456"


@dataclass
class ConsoleBroker:
    broker: RunningBroker
    admin: httpx.Client
    #: Requests the browser tried to send elsewhere than 127.0.0.1 (must stay empty).
    blocked: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.broker.url


@pytest.fixture(scope="module")
def console_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleBroker]:
    base = tmp_path_factory.mktemp("console")
    auth = base / "auth.json"
    auth.write_text(
        json.dumps(
            {
                "tokens": [
                    {"name": "ops", "token": ADMIN_TOKEN, "admin": ["*"], "produce": ["*"], "consume": ["*"]},
                    {"name": "reader", "token": READER_TOKEN, "consume": ["*"]},
                ]
            }
        )
    )
    config = ServerConfig(store=light_config(base / "store"), auth_file=auth, console_sample_interval_s=0.5)
    running = start_broker(config)
    admin = running.client(ADMIN_TOKEN)
    admin.put("/topics/orders", json={"queues": 4}).raise_for_status()
    batch = [
        {
            "body": json.dumps({"order": i, "total": i * 10}),
            "keys": [f"order-{i}"],
            "tags": "new",
            "queue_id": i % 4,
        }
        for i in range(40)
    ]
    admin.post("/topics/orders/messages:batch", json={"messages": batch}).raise_for_status()
    admin.post("/topics/audit/messages", json={"body_base64": "AAECA/7/", "tags": "bin"}).raise_for_status()
    admin.put("/groups/billing/offsets", json={"topic": "orders", "offsets": {"0": 5, "1": 10, "2": 0}})
    # What the operator job reports (streaming.operators.runtime.query_status).
    status = {
        "state": "active",
        "last_batch_id": 7,
        "last_batch_time": "2026-11-24T03:00:00.000Z",
        "input_lag": 0,
    }
    admin.put("/operators/delay/status", json=status).raise_for_status()
    yield ConsoleBroker(running, admin)
    running.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (.ci/run does)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


@dataclass
class BrowserSession:
    page: Page
    errors: list[str]
    shots: Path

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


def _offline(blocked: list[str]) -> object:
    def handle(route: Route) -> None:
        host = urllib.parse.urlsplit(route.request.url).hostname
        if host == "127.0.0.1":
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    return handle


@pytest.fixture
def session(browser: Browser, console_broker: ConsoleBroker, tmp_path: Path) -> Iterator[BrowserSession]:
    """A fresh browser context (no cookies), offline, recording console errors and CSP
    violations; screenshots go to the test's tmp dir."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.route("**/*", _offline(console_broker.blocked))  # type: ignore[arg-type]
    page.set_default_timeout(15_000)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    yield BrowserSession(page, errors, shots)
    context.close()
    if os.environ.get("SPARKMQ_CONSOLE_SHOTS"):
        shutil.copytree(shots, Path(os.environ["SPARKMQ_CONSOLE_SHOTS"]), dirs_exist_ok=True)


def login(session: BrowserSession, url: str, token: str = ADMIN_TOKEN, path: str = "/console/") -> None:
    page = session.page
    page.goto(url + path)
    page.wait_for_url("**/console/login**")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(url + path)
