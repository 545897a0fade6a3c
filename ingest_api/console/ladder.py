"""Console pages for transactions left open and for a group's dead letters (with re-send)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse

from broker.auth import Right
from broker.retries import resend_dead_letter
from broker.threads import run_blocking
from ingest_api.console.web import PREFIX, ViewerDep, page
from store import MessageView, dlq_topic, validate_group

router = APIRouter(prefix=PREFIX, include_in_schema=False)
PAGE_SIZE = 100


def _transactions(viewer: Any, state: str) -> list[dict[str, Any]]:
    board = viewer.broker.operators.transactions if viewer.broker.operators is not None else None
    if board is None:
        return []
    now = viewer.broker.store.now_ms()
    rows = []
    for tx in sorted(board.service.transactions(), key=lambda t: (t.born_ms, t.transaction_id)):
        shown = {None: "prepared", "commit": "committed", "rollback": "rolled_back", "discard": "discarded"}
        tx_state = shown[tx.outcome.value if tx.outcome else None]
        if state not in ("all", tx_state):
            continue
        if not all(viewer.may_read(t) for t in tx.topics):
            continue
        rows.append(
            {
                "id": tx.transaction_id, "group": tx.producer_group, "state": tx_state,
                "topics": ", ".join(tx.topics), "messages": len(tx.halves),
                "age_s": max(0, now - tx.born_ms) // 1000, "checks": tx.check_times,
            }
        )  # fmt: skip
        if len(rows) >= 1000:
            break
    return rows


@router.get("/transactions", response_class=HTMLResponse)
async def transactions(request: Request, viewer: ViewerDep, state: str = "prepared") -> HTMLResponse:
    """Transactions (open ones by default): age, check-backs, topics."""
    state = state if state in ("prepared", "committed", "rolled_back", "discarded", "all") else "prepared"
    rows = await run_blocking(_transactions, viewer, state)
    return page(request, "transactions.html", viewer, section="transactions", rows=rows, state=state)


def _letter(view: MessageView) -> dict[str, Any]:
    """A dead letter as the page shows it (its body as text when it is UTF-8)."""
    try:
        body: str | None = view.body.decode("utf-8")
    except UnicodeDecodeError:
        body = None
    return {
        "queue_offset": view.queue_offset,
        "properties": view.properties,
        "reconsume_times": view.reconsume_times,
        "body": body,
        "msg_id": view.msg_id,
    }


def _dead_letters(viewer: Any, group: str, offset: int) -> tuple[list[dict[str, Any]], int]:
    store = viewer.broker.store
    topic = dlq_topic(validate_group(group))
    if not store.has_topic(topic):
        return [], 0
    start = max(offset, store.min_offset(topic, 0))
    got = store.get_messages(topic, 0, start, PAGE_SIZE)
    return [_letter(v) for v in got.messages], got.next_offset


@router.get("/groups/{group}/dlq", response_class=HTMLResponse)
async def dead_letters(
    request: Request, group: str, viewer: ViewerDep, offset: int = 0, resent: str = ""
) -> HTMLResponse:
    """A group's dead letters (``%DLQ%group``), a page at a time, each with a re-send button."""
    viewer.require(Right.CONSUME, dlq_topic(group))
    letters, next_offset = await run_blocking(_dead_letters, viewer, group, max(0, offset))
    return page(
        request, "dlq.html", viewer, section="groups", group=group, letters=letters,
        next_offset=next_offset, offset=offset, resent=resent,
    )  # fmt: skip


@router.post("/groups/{group}/dlq/{msg_id}/resend", response_class=HTMLResponse)
async def resend(
    request: Request,
    group: str,
    msg_id: str,
    viewer: ViewerDep,
    confirm: Annotated[str, Form(max_length=255)],
) -> HTMLResponse:
    """Re-send one dead letter to its original topic; the message id typed in confirms it."""
    viewer.require(Right.CONSUME, dlq_topic(group))
    if confirm != "resend":
        letters, next_offset = await run_blocking(_dead_letters, viewer, group, 0)
        return page(
            request, "dlq.html", viewer, status_code=400, section="groups", group=group, letters=letters,
            next_offset=next_offset, offset=0, resent="", error="Type resend to confirm.",
        )  # fmt: skip
    result = await run_blocking(resend_dead_letter, viewer.broker.store, group, msg_id)
    letters, next_offset = await run_blocking(_dead_letters, viewer, group, 0)
    text = f"Re-sent to {result.topic} queue {result.queue_id} offset {result.queue_offset}"
    return page(
        request, "dlq.html", viewer, section="groups", group=group, letters=letters,
        next_offset=next_offset, offset=0, resent=text,
    )  # fmt: skip
