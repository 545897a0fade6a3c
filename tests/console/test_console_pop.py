"""A POP group's console page in a real headless Chromium against a real broker: in-flight
count, oldest in-flight age, retries and the DLQ count (``PopService.stats``)."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.support.waiting import wait_until

from .conftest import BrowserSession, ConsoleBroker, login

# Drives a real Chromium: in `make test`, not in `make test-fast`.
pytestmark = pytest.mark.slow


def _receive(broker: ConsoleBroker, invisible_ms: int) -> list[dict[str, Any]]:
    answer = broker.admin.post(
        "/groups/console_pop/topics/console_pop_work/messages:receive",
        json={"max_messages": 32, "invisible_ms": invisible_ms, "wait_ms": 3000},
    )
    assert answer.status_code == 200, answer.text
    return list(answer.json()["messages"])


def test_pop_group_page_shows_inflight_retries_and_dead_letters(
    session: BrowserSession, console_broker: ConsoleBroker
) -> None:
    admin = console_broker.admin
    pop = console_broker.broker.server.app.state.broker.pop
    pop.configure_group("console_pop", max_retries=1)  # two deliveries, then the DLQ
    batch = {"messages": [{"body": f"job {i}"} for i in range(5)]}
    assert admin.post("/topics/console_pop_work/messages:batch", json=batch).status_code == 201
    first = _receive(console_broker, 1000)
    assert len(first) == 5
    acked = admin.post(
        "/groups/console_pop/messages:ack", json={"receipt_handles": [m["receipt_handle"] for m in first[:2]]}
    )
    assert acked.json()["acked"] == 2
    again = _receive(console_broker, 1000)  # the three unacked, back with attempt 2
    assert sorted(m["delivery_attempt"] for m in again) == [2, 2, 2]
    wait_until(lambda: pop.stats("console_pop").dead_letters == 3, 10, "three dead letters")
    more = {"messages": [{"body": "late 1"}, {"body": "late 2"}]}
    assert admin.post("/topics/console_pop_work/messages:batch", json=more).status_code == 201
    late = _receive(console_broker, 60_000)
    assert len(late) == 2

    page = session.page
    login(session, console_broker.url, path="/console/groups/console_pop")
    expect(page.locator("h1")).to_contain_text("POP")
    expect(page.locator("#pop-inflight")).to_have_text("2")
    expect(page.locator("#pop-retries")).to_have_text("3")
    expect(page.locator("#pop-dead")).to_have_text("3")
    expect(page.locator("#pop-dlq")).to_have_text("3")
    expect(page.locator("#pop-oldest")).to_contain_text(" s")
    expect(page.locator("#pop-topics")).to_contain_text("console_pop_work")
    session.shot("pop-group")
    # The group list shows it as a POP group with its counts (billing, offset-based, as before).
    page.goto(f"{console_broker.url}/console/groups")  # logged in above
    row = page.locator("#group-rows tr[data-group='console_pop']")
    expect(row.locator(".kind")).to_have_text("POP")
    expect(row.locator(".topics")).to_have_text("console_pop_work")
    expect(row.locator(".inflight")).to_have_text("2")
    expect(row.locator(".visible-again")).to_have_text("0")
    expect(page.locator("#group-rows tr[data-group='billing'] .kind")).to_have_text("offset table")
    session.shot("pop-group-list")
    handles = {"receipt_handles": [m["receipt_handle"] for m in late]}
    assert admin.post("/groups/console_pop/messages:ack", json=handles).json()["acked"] == 2
    page.reload()
    expect(row.locator(".inflight")).to_have_text("0")
    # The offset routes refuse the POP group (the group-kind rule).
    refused = admin.put(
        "/groups/console_pop/offsets", json={"topic": "console_pop_work", "offsets": {"0": 0}}
    )
    assert refused.status_code == 409 and refused.json()["error"] == "group_kind_conflict"
