"""Console pages that change things: offset reset (dry-run diff first) and topic deletion.

Both need the admin right on the topic and a typed confirmation (the group or topic name),
so neither a stray click nor a forged form can do them.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from broker.auth import Right
from broker.errors import BrokerError
from broker.resets import ResetRow, ResetTarget, apply_reset, plan_reset
from broker.threads import run_blocking
from ingest_api.console.messages import parse_when
from ingest_api.console.web import PREFIX, Viewer, ViewerDep, page
from ingest_api.params import TopicPath
from store import MessageStore, SparkMQError, UnknownTopic, validate_topic

router = APIRouter(prefix=PREFIX, include_in_schema=False)

TARGETS: tuple[ResetTarget, ...] = ("earliest", "latest", "timestamp", "shift")


def _plan(
    store: MessageStore, group: str, topic: str, to: ResetTarget, at: str, shift_by: int
) -> list[ResetRow]:
    return plan_reset(
        store, group, topic, to,
        timestamp_ms=parse_when(at, 0) if to == "timestamp" else None,
        shift_by=shift_by if to == "shift" else None,
    )  # fmt: skip


def _execute(
    store: MessageStore, group: str, topic: str, to: ResetTarget, at: str, shift_by: int
) -> list[ResetRow]:
    rows = _plan(store, group, topic, to, at, shift_by)
    apply_reset(store, group, topic, rows)
    return rows


@router.get("/groups/{group}/reset", response_class=HTMLResponse)
async def reset_form(
    request: Request,
    group: str,
    viewer: ViewerDep,
    topic: Annotated[str, Query(max_length=255)] = "",
) -> HTMLResponse:
    return page(
        request, "reset.html", viewer, section="groups", group=group, topic=topic, to="earliest", at="",
        shift_by=0, rows=None, executed=False, error=None, targets=TARGETS,
    )  # fmt: skip


async def _reset(
    request: Request,
    viewer: Viewer,
    group: str,
    form: tuple[str, ResetTarget, str, int],
    confirm: str | None,
) -> HTMLResponse:
    topic, to, at, shift_by = form
    execute = confirm is not None
    rows: list[ResetRow] | None = None
    error = None
    try:
        viewer.require(Right.ADMIN if execute else Right.CONSUME, topic)
        if execute and confirm != group:
            raise ValueError(f"type the group name {group!r} to confirm the reset")
        action = _execute if execute else _plan
        rows = await run_blocking(action, viewer.broker.store, group, topic, to, at, shift_by)
    except (SparkMQError, BrokerError, ValueError) as exc:
        error, execute = str(exc), False
    return page(
        request, "reset.html", viewer, status_code=200 if error is None else 400, section="groups",
        group=group, topic=topic, to=to, at=at, shift_by=shift_by, rows=rows, executed=execute,
        error=error, targets=TARGETS,
    )  # fmt: skip


ResetForm = Annotated[str, Form(max_length=255)]


@router.post("/groups/{group}/reset/preview", response_class=HTMLResponse)
async def reset_preview(
    request: Request,
    group: str,
    viewer: ViewerDep,
    topic: ResetForm,
    to: Annotated[ResetTarget, Form()] = "earliest",
    at: Annotated[str, Form(max_length=64)] = "",
    shift_by: Annotated[int, Form(ge=-(2**62), le=2**62)] = 0,
) -> HTMLResponse:
    """The dry run: per queue the current and the target offset; nothing is committed."""
    return await _reset(request, viewer, group, (topic, to, at, shift_by), None)


@router.post("/groups/{group}/reset/execute", response_class=HTMLResponse)
async def reset_execute(
    request: Request,
    group: str,
    viewer: ViewerDep,
    topic: ResetForm,
    confirm: Annotated[str, Form(max_length=255)],
    to: Annotated[ResetTarget, Form()] = "earliest",
    at: Annotated[str, Form(max_length=64)] = "",
    shift_by: Annotated[int, Form(ge=-(2**62), le=2**62)] = 0,
) -> HTMLResponse:
    """Commit the reset; needs the admin right on the topic and the group name typed in."""
    return await _reset(request, viewer, group, (topic, to, at, shift_by), confirm)


def _delete(store: MessageStore, topic: str) -> None:
    validate_topic(topic)
    if not store.delete_topic(topic):
        raise UnknownTopic(f"topic {topic!r} does not exist")


@router.post("/topics/{topic}/delete", response_model=None)
async def delete_topic(
    request: Request, topic: TopicPath, viewer: ViewerDep, confirm: Annotated[str, Form(max_length=255)]
) -> Response:
    """Delete a topic: admin right on it and its name typed in."""
    viewer.require(Right.ADMIN, topic)
    if confirm != topic:
        return page(
            request, "message_box.html", viewer, status_code=400, section="topics",
            title="Not deleted", text=f"Type the topic name {topic!r} exactly to delete it.",
        )  # fmt: skip
    await run_blocking(_delete, viewer.broker.store, topic)
    return RedirectResponse(f"{PREFIX}/topics", status_code=303)
