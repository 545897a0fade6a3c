"""The console's Cluster page and the broker names on a topic's page, in a real headless Chromium:
a lone broker shows itself as ``local``; three brokers of one cluster (real ZooKeeper) show
each other, which queue is where, and a stopped broker as down."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Route, expect

from tests.cluster.conftest import zk_url, zookeeper
from tests.cluster.inprocess import InProcessCluster
from tests.support.waiting import wait_until

from .conftest import BrowserSession, ConsoleBroker, login

__all__ = ["zk_url", "zookeeper"]

# Drives a real Chromium: in `make test`, not in `make test-fast`.
pytestmark = pytest.mark.slow


def test_a_lone_broker_shows_itself(session: BrowserSession, console_broker: ConsoleBroker) -> None:
    page = session.page
    login(session, console_broker.url, path="/console/cluster")
    expect(page.locator("#cluster-mode")).to_have_text("single")
    expect(page.locator("#cluster-self")).to_have_text("local")
    expect(page.locator("#cluster-live")).to_have_text("1 of 1")
    broker = page.locator("#brokers tbody tr")
    expect(broker).to_have_count(1)
    expect(broker.first).to_contain_text("alive")
    expect(broker.first).to_contain_text(console_broker.url)
    expect(page.locator('#placement tr[data-topic="orders"]')).to_contain_text("local: 0, 1, 2, 3")
    session.shot("cluster-single")
    page.goto(console_broker.url + "/console/topics/orders")
    expect(page.locator('#queues tr[data-queue="2"] td').nth(1)).to_have_text("local")
    assert session.errors == [] and console_broker.blocked == []


@pytest.fixture
def trio(zk_url: str, tmp_path: Path) -> Iterator[InProcessCluster]:
    cluster = InProcessCluster(zk_url, tmp_path)
    for name in ("b1", "b2", "b3"):
        cluster.start(name)
    cluster.wait_converged(3)
    with cluster.http("b1") as http:
        http.put("/topics/spread", json={"queues": 6}).raise_for_status()
        for queue in range(6):
            http.post(
                "/topics/spread/messages", json={"body": f"m{queue}", "queue_id": queue}
            ).raise_for_status()
    yield cluster
    cluster.stop_all()


@pytest.fixture
def offline_page(browser: Browser) -> Iterator[tuple[Page, list[str]]]:
    """A fresh page that may only reach 127.0.0.1, and the errors it logs."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    def local_only(route: Route) -> None:
        if urllib.parse.urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            errors.append(f"blocked {route.request.url}")
            route.abort()

    page.route("**/*", local_only)
    page.set_default_timeout(15_000)
    yield page, errors
    context.close()


def test_three_brokers_and_where_each_queue_lives(
    offline_page: tuple[Page, list[str]], trio: InProcessCluster, tmp_path: Path
) -> None:
    page, errors = offline_page
    b2 = trio.brokers["b2"].url
    page.goto(b2 + "/console/cluster")
    expect(page.locator("#cluster-mode")).to_have_text("cluster")
    expect(page.locator("#cluster-self")).to_have_text("b2")
    expect(page.locator("#cluster-live")).to_have_text("3 of 3")
    expect(page.locator("#cluster-session")).to_have_text("connected")
    rows = page.locator("#brokers tbody tr")
    expect(rows).to_have_count(3)
    for name in ("b1", "b2", "b3"):
        row = page.locator(f'#brokers tr[data-broker="{name}"]')
        expect(row).to_contain_text("alive")
        expect(row).to_contain_text(trio.brokers[name].url)
        expect(row.locator("td").last).to_have_text("2")
    expect(page.locator('#brokers tr[data-broker="b2"]')).to_contain_text("(this broker)")
    spread = page.locator('#placement tr[data-topic="spread"]')
    expect(spread).to_contain_text("b1: 0, 3")
    expect(spread).to_contain_text("b2: 1, 4")
    expect(spread).to_contain_text("b3: 2, 5")
    page.screenshot(path=str(tmp_path / "cluster.png"), full_page=True)

    page.goto(b2 + "/console/topics/spread")
    mine = page.locator('#queues tr[data-queue="1"] td')
    expect(mine.nth(1)).to_have_text("b2")
    expect(mine.nth(3)).to_have_text("1")  # max offset: m1 is stored here
    elsewhere = page.locator('#queues tr[data-queue="0"]')
    expect(elsewhere).to_contain_text("stored on b1")
    expect(elsewhere.locator("a")).to_have_attribute(
        "href", trio.brokers["b1"].url + "/console/topics/spread"
    )
    page.screenshot(path=str(tmp_path / "topic.png"), full_page=True)

    trio.stop("b3")

    def b3_down() -> bool:
        page.goto(b2 + "/console/cluster")
        return page.locator("#cluster-live").inner_text() == "2 of 3"

    wait_until(b3_down, 20, "b2's console to show b3 down")
    expect(page.locator('#brokers tr[data-broker="b3"]')).to_contain_text("down")
    expect(page.locator('#placement tr[data-topic="spread"] [data-broker="b3"]')).to_contain_text("(down)")
    assert errors == []
