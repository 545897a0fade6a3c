"""Dependencies shared by the routers, as ``Annotated`` aliases."""

from __future__ import annotations

from email.message import Message as MimeHeader
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from broker.auth import Principal, caller, internal_caller
from broker.errors import BrokerError
from broker.state import Broker

#: Declares the bearer scheme in OpenAPI; the check itself is :func:`broker.auth.authenticate`.
_bearer_scheme = HTTPBearer(auto_error=False, description="Only when the broker runs with --auth-file.")


async def get_broker(request: Request) -> Broker:
    broker: Broker = request.app.state.broker
    return broker


BrokerDep = Annotated[Broker, Depends(get_broker)]


async def get_principal(
    request: Request,
    broker: BrokerDep,
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)],
) -> Principal | None:
    """The caller's token holder; ``None`` when auth is off. 401 when required and bad. A
    request a broker forwards is judged on the user it carries (docs/security.md)."""
    return caller(broker.auth, request.headers)


PrincipalDep = Annotated[Principal | None, Depends(get_principal)]


async def require_internal_caller(request: Request, broker: BrokerDep) -> None:
    """Internal routes (broker to broker): 401 without a credential, 403 for every user."""
    internal_caller(broker.auth, request.headers, request.url.path)


InternalOnly = Depends(require_internal_caller)


def media_type(request: Request, header: str = "content-type") -> str:
    """``type/subtype`` of a header, lower-cased, parameters dropped ('' when absent)."""
    value = request.headers.get(header)
    if not value:
        return ""
    parsed = MimeHeader()
    parsed["content-type"] = value
    return parsed.get_content_type().lower()


async def require_json_body(request: Request) -> None:
    """415 unless the request body is declared as JSON (an absent Content-Type is accepted)."""
    declared = media_type(request)
    if declared and declared != "application/json" and not declared.endswith("+json"):
        raise BrokerError(415, "unsupported_media_type", f"expected application/json, got {declared!r}")


JsonBody = Depends(require_json_body)
