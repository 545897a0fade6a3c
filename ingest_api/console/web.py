"""The console's plumbing: templates, security headers, who the viewer is, and the login form.

Auth is the API's: the same token table and rights. A browser cannot send a bearer header on
a link, so ``POST /console/login`` checks a token and keeps it in an ``HttpOnly``,
``SameSite=Strict`` cookie; every console request is then authenticated from that cookie (or
from an ``Authorization`` header, for scripts). Unsafe requests must also come from the
console's own origin (``Origin``/``Referer`` checked when the browser sends them), and
destructive ones need a typed confirmation (see the admin routes).

Every console response carries ``Content-Security-Policy: default-src 'self'``: no inline
script or style, nothing from another host. The pages work offline.
"""

from __future__ import annotations

import time
import urllib.parse
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from broker.auth import Principal, Right, authenticate, is_global_admin, may, may_any
from broker.errors import BrokerError
from broker.state import Broker

PREFIX = "/console"
COOKIE = "sparkmq_console"
HERE = Path(__file__).parent
CSP = "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]

templates = Jinja2Templates(directory=str(HERE / "templates"))


def _when(ms: int | None) -> str:
    if ms is None or ms <= 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 120:
        return f"{value:.1f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


templates.env.filters["when"] = _when
templates.env.filters["seconds"] = _seconds


class ConsoleHeaders:
    """ASGI middleware: security headers on every response under ``/console``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(PREFIX):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)


class Viewer:
    """The console user: ``principal`` is ``None`` when auth is off (everything allowed)."""

    def __init__(self, broker: Broker, principal: Principal | None) -> None:
        self.broker = broker
        self.principal = principal

    @property
    def name(self) -> str:
        return "anonymous (auth off)" if self.principal is None else self.principal.name

    @property
    def auth_on(self) -> bool:
        return self.broker.auth is not None

    def may(self, right: Right, topic: str) -> bool:
        return may(self.principal, right, topic)

    def may_admin(self, topic: str) -> bool:
        return self.may(Right.ADMIN, topic)

    def may_read(self, topic: str) -> bool:
        return self.may(Right.CONSUME, topic)

    def may_see(self, topic: str) -> bool:
        return may_any(self.principal, topic)

    @property
    def is_global_admin(self) -> bool:
        return is_global_admin(self.principal)

    def require(self, right: Right, topic: str) -> None:
        if not self.may(right, topic):
            raise BrokerError(403, "forbidden", f"{self.name!r} may not {right.value} topic {topic!r}")

    def require_read(self, topic: str) -> None:
        self.require(Right.CONSUME, topic)

    def require_global_admin(self) -> None:
        if not self.is_global_admin:
            raise BrokerError(403, "forbidden", f"{self.name!r} lacks admin rights on '*'")


def _login_redirect(request: Request) -> HTTPException:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    location = f"{PREFIX}/login?next={urllib.parse.quote(target, safe='')}"
    return HTTPException(303, "login required", headers={"Location": location})


def _same_origin(request: Request) -> bool:
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source:
        return True  # non-browser clients; the SameSite=Strict cookie covers browsers
    parsed = urllib.parse.urlsplit(source)
    return parsed.netloc == request.headers.get("host", "")


async def get_viewer(request: Request) -> Viewer:
    """The authenticated viewer; a redirect to the login form when auth is on and no valid
    token came (pages), or 401 (``HX-Request``s, where a redirect would land inside a fragment)."""
    broker: Broker = request.app.state.broker
    if request.method not in ("GET", "HEAD") and not _same_origin(request):
        raise BrokerError(403, "cross_origin", "console forms must be posted from the console itself")
    if broker.auth is None:
        return Viewer(broker, None)
    header = request.headers.get("authorization")
    cookie = request.cookies.get(COOKIE)
    if not header and not cookie:
        if request.headers.get("hx-request"):
            raise BrokerError(401, "unauthorized", "log in to the console first")
        raise _login_redirect(request)
    try:
        principal = authenticate(broker.auth, header or f"Bearer {cookie}")
    except BrokerError:
        if header or request.headers.get("hx-request"):
            raise
        raise _login_redirect(request) from None
    return Viewer(broker, principal)


ViewerDep = Annotated[Viewer, Depends(get_viewer)]


def page(
    request: Request, template: str, viewer: Viewer | None, status_code: int = 200, **context: Any
) -> HTMLResponse:
    """Render a template with the common context (viewer, active section)."""
    return templates.TemplateResponse(
        request, template, {"viewer": viewer, "prefix": PREFIX, **context}, status_code=status_code
    )


router = APIRouter(prefix=PREFIX, include_in_schema=False)


def _safe_next(target: str) -> str:
    """Only redirect inside the console after login (no open redirect)."""
    return (
        target
        if target.startswith(PREFIX + "/") and "//" not in target and "\\" not in target
        else f"{PREFIX}/"
    )


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request, next: str = f"{PREFIX}/") -> HTMLResponse:
    return page(request, "login.html", None, next=_safe_next(next), error=None)


@router.post("/login", response_model=None)
async def login(
    request: Request,
    token: Annotated[str, Form(max_length=4096)],
    next: Annotated[str, Form(max_length=2048)] = f"{PREFIX}/",
) -> Response:
    broker: Broker = request.app.state.broker
    if not _same_origin(request):
        raise BrokerError(403, "cross_origin", "log in from the console's own page")
    target = _safe_next(next)
    if broker.auth is None:
        return RedirectResponse(target, status_code=303)
    if broker.auth.by_token(token.strip()) is None:
        return page(request, "login.html", None, status_code=401, next=target, error="Unknown token.")
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE,
        token.strip(),
        httponly=True,
        samesite="strict",
        path=PREFIX,
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout", response_model=None)
async def logout(request: Request) -> Response:
    if not _same_origin(request):
        raise BrokerError(403, "cross_origin", "log out from the console's own page")
    response = RedirectResponse(f"{PREFIX}/login", status_code=303)
    response.delete_cookie(COOKIE, path=PREFIX)
    return response
