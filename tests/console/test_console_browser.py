"""The console in a real headless Chromium against a real broker: every page, a lookup click-
through, a dry-run reset then an executed one, produce, live tail; offline and CSP-clean."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from .conftest import READER_TOKEN, BrowserSession, ConsoleBroker, login

# Drives a real Chromium: in `make test`, not in `make test-fast`.
pytestmark = pytest.mark.slow


def _clean(session: BrowserSession, broker: ConsoleBroker, refusals: int = 0) -> None:
    """No script error, no CSP violation, no request off 127.0.0.1; Chromium logs each
    refused form (a 400 page) as an error, so the expected ones are counted out."""
    refused = [e for e in session.errors if "status of 400" in e]
    assert len(refused) == refusals, session.errors
    assert [e for e in session.errors if e not in refused] == [], session.errors
    assert broker.blocked == [], broker.blocked


def test_login_then_overview_with_live_charts(session: BrowserSession, console_broker: ConsoleBroker) -> None:
    page = session.page
    login(session, console_broker.url)
    expect(page.locator("h1")).to_have_text("Overview")
    expect(page.locator("#topic-count")).to_have_text("2")
    # Traffic while the page samples, so the charts have something to draw.
    for i in range(5):
        console_broker.admin.post("/topics/orders/messages", json={"body": f"live {i}"}).raise_for_status()
    charts = page.locator("#charts")
    expect(charts).to_have_attribute("data-samples", re.compile(r"^([3-9]|\d\d+)$"), timeout=20_000)
    expect(page.locator("#charts canvas")).to_have_count(4)
    session.shot("overview")
    _clean(session, console_broker)


def test_topics_filter_detail_and_browse(session: BrowserSession, console_broker: ConsoleBroker) -> None:
    page = session.page
    login(session, console_broker.url, path="/console/topics")
    rows = page.locator("#topic-rows tbody tr")
    expect(rows).to_have_count(2)
    page.fill("#topic-filter", "aud")  # htmx re-renders only the rows
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("audit")
    session.shot("topics")

    page.goto(console_broker.url + "/console/topics/orders")
    expect(page.locator("table").first.locator("tbody tr")).to_have_count(4)
    expect(page.locator("body")).to_contain_text("billing")
    session.shot("topic")

    page.goto(console_broker.url + "/console/topics/orders/messages?mode=offset&queue=1&offset=0&limit=3")
    expect(page.locator("#messages tbody tr")).to_have_count(3)
    expect(page.locator("#messages")).to_contain_text('"order": 1')
    page.select_option("#view", "hex")
    page.click("#browse-form button[type=submit]")
    expect(page.locator("#messages")).to_contain_text("7b 22 6f 72 64 65 72")  # {"order
    page.goto(console_broker.url + "/console/topics/audit/messages?mode=newest&view=hex")
    expect(page.locator("#messages")).to_contain_text("00 01 02 03 fe ff")
    session.shot("browse")
    _clean(session, console_broker)


def test_lookup_by_key_click_through_to_consumers(
    session: BrowserSession, console_broker: ConsoleBroker
) -> None:
    page = session.page
    login(session, console_broker.url, path="/console/lookup")
    page.select_option("#kind", "key")
    page.fill("#value", "order-1")  # queue 1, offset 0: billing committed 10 there
    page.fill("#lookup-topic", "orders")
    page.click("#find")
    expect(page.locator("#hit-count")).to_have_text("1 hit(s).")
    expect(page.locator(".consumed-by")).to_contain_text("billing (committed 10)")
    page.locator(".hit a[href*='/console/messages/']").first.click()
    expect(page.locator("h1")).to_have_text("Message")
    page.click("text=json")
    expect(page.locator("#body")).to_contain_text('"total": 10')
    session.shot("message")
    _clean(session, console_broker)


def _offsets(broker: ConsoleBroker) -> dict[str, int]:
    answer = broker.admin.get("/groups/billing/offsets", params={"topic": "orders"})
    answer.raise_for_status()
    offsets: dict[str, int] = answer.json()["offsets"]
    return offsets


def test_reset_dry_run_diff_then_typed_confirmation(
    session: BrowserSession, console_broker: ConsoleBroker
) -> None:
    page = session.page
    before = _offsets(console_broker)
    login(session, console_broker.url, path="/console/groups")
    expect(page.locator("#group-rows")).to_contain_text("billing")
    page.click("#group-rows a:text('billing')")
    expect(page.locator("h1")).to_contain_text("billing")
    page.click("text=Reset offsets of billing on orders")
    page.select_option("#reset-to", "earliest")
    page.click("#dry-run")
    diff = page.locator("#reset-diff tbody tr")
    expect(diff).to_have_count(4)
    expect(diff.nth(1)).to_contain_text("-10")
    session.shot("reset-dry-run")
    assert _offsets(console_broker) == before, "a dry run must not commit"

    page.fill("#confirm-reset", "not-the-group")
    page.click("#execute")
    expect(page.locator(".error")).to_contain_text("type the group name")
    assert _offsets(console_broker) == before

    page.click("#dry-run")
    page.fill("#confirm-reset", "billing")
    page.click("#execute")
    expect(page.locator("#reset-done")).to_be_visible()
    assert _offsets(console_broker) == {"0": 0, "1": 0, "2": 0, "3": 0}
    session.shot("reset-executed")
    _clean(session, console_broker, refusals=1)


def test_reader_token_cannot_execute_a_reset(session: BrowserSession, console_broker: ConsoleBroker) -> None:
    page = session.page
    before = _offsets(console_broker)
    login(session, console_broker.url, token=READER_TOKEN, path="/console/groups/billing/reset?topic=orders")
    page.select_option("#reset-to", "latest")
    page.click("#dry-run")
    expect(page.locator("#reset-diff tbody tr")).to_have_count(4)
    page.fill("#confirm-reset", "billing")
    page.click("#execute")
    expect(page.locator(".error")).to_contain_text("may not admin topic 'orders'")
    assert _offsets(console_broker) == before
    _clean(session, console_broker, refusals=1)


def test_produce_form_and_live_tail(session: BrowserSession, console_broker: ConsoleBroker) -> None:
    page = session.page
    login(session, console_broker.url, path="/console/topics/orders/tail")
    expect(page.locator("#tail-status")).to_have_text("live: waiting for messages")
    stamp = str(time.time_ns())
    console_broker.admin.post("/topics/orders/messages", json={"body": f"tailed {stamp}", "tags": "tail"})
    expect(page.locator("#tail-rows")).to_contain_text(f"tailed {stamp}")
    session.shot("tail")

    tail = page.context.new_page()
    tail.goto(console_broker.url + "/console/topics/orders/produce")
    tail.fill("#body", f"from the form {stamp}")
    tail.fill("#keys", f"form-{stamp}")
    tail.fill("#properties", "origin=console")
    tail.click("#send")
    expect(tail.locator("#produced")).to_contain_text("Stored: queue")
    expect(page.locator("#tail-rows")).to_contain_text(f"from the form {stamp}")
    tail.click("#produced a")
    expect(tail.locator("body")).to_contain_text("origin")
    _clean(session, console_broker)


def test_operators_page(session: BrowserSession, console_broker: ConsoleBroker) -> None:
    page = session.page
    login(session, console_broker.url, path="/console/operators")
    row = page.locator("#operators tbody tr").first
    expect(row).to_contain_text("delay")
    expect(row).to_contain_text("active")
    expect(page.locator("#operator-job")).to_contain_text("outside the broker")
    session.shot("operators")
    _clean(session, console_broker)


def test_groups_overview_export_and_security_headers(console_broker: ConsoleBroker) -> None:
    """Plain HTTP checks of what the browser tests rely on."""
    client = console_broker.broker.client()
    login_page = client.get("/console/", follow_redirects=False)
    assert login_page.status_code == 303 and "/console/login" in login_page.headers["location"]
    admin = console_broker.admin
    page = admin.get("/console/topics")
    assert page.headers["content-security-policy"].startswith("default-src 'self'")
    assert "<script>" not in page.text and " style=" not in page.text
    export = admin.get(
        "/console/topics/orders/export", params={"mode": "offset", "queue": "0", "format": "ndjson"}
    )
    lines = export.text.splitlines()
    assert export.headers["content-type"].startswith("application/x-ndjson") and len(lines) >= 10
    assert admin.get("/", follow_redirects=False).headers["location"] == "/console/"


def test_transactions_and_dead_letters_pages(session: BrowserSession, console_broker: ConsoleBroker) -> None:
    admin = console_broker.admin
    half = admin.post(
        "/topics/console_tx/messages", json={"body": "open", "transaction": {"producer_group": "console_pg"}}
    ).json()
    admin.put("/groups/console_dlq", json={"max_reconsume_times": 0})
    poison = admin.post("/topics/console_work/messages", json={"body": "poison pill"}).json()
    sent = admin.post(
        "/groups/console_dlq/messages:sendBack",
        json={"topic": "console_work", "msg_id": poison["msg_id"], "delay_level": -1},
    ).json()
    assert sent["outcome"] == "dlq"
    # The retry resolver's job (not running beside this in-process broker) would relocate the
    # send-back request; do what the broker does with its decision.
    from store import Relocation, RelocationKind

    store = console_broker.broker.server.app.state.broker.store
    requests = store.get_messages("rmq_sys_sendback", 0, 0, 1000).messages
    mine = [r for r in requests if r.uniq_key == sent["request_id"]]
    store.relocate([Relocation(mine[0].commitlog_offset, RelocationKind.SENDBACK)])
    page = session.page
    login(session, console_broker.url, path="/console/transactions")
    expect(page.locator("#transactions")).to_contain_text(half["transaction_id"])
    expect(page.locator("#transactions")).to_contain_text("console_pg")
    session.shot("transactions")
    page.goto(f"{console_broker.url}/console/groups/console_dlq/dlq")
    row = page.locator("#dead-letters tbody tr").first
    expect(row).to_contain_text("poison pill")
    expect(row).to_contain_text("console_work")
    row.locator("input[name=confirm]").fill("resend")
    row.locator("button").click()
    expect(page.locator("#resent")).to_contain_text("Re-sent to console_work")
    session.shot("dead-letters")
    queues = admin.get("/topics/console_work").json()["queue_offsets"]
    bodies = [
        m["body"]
        for q in queues
        for m in admin.get(f"/topics/console_work/queues/{q['queue_id']}/messages").json()["messages"]
    ]
    assert bodies.count("poison pill") == 2
    _clean(session, console_broker)
