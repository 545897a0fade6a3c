"""Bodies of POP consumption: receive, ack, change invisible time (docs/pop.md).

The ranges (``max_messages`` 1..32, ``invisible_ms`` 1 s .. 12 h, ``wait_ms`` 0..30 s) are the
POP service's (:class:`broker.pop.PopConfig`), stated here so the document is the contract: a
value out of range is a 422 ``validation_error`` naming the field (the service's own codes,
``invalid_max_messages`` and the like, are what the other doors answer).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from broker.pop import MAX_MESSAGES_PER_RECEIVE, PopConfig
from ingest_api.http.fields import JSON_INTEGER
from ingest_api.http.schemas.messages import MessageOut
from store import MessageView

_LIMITS = PopConfig()
MaxMessages = Annotated[int, Field(ge=1, le=MAX_MESSAGES_PER_RECEIVE), JSON_INTEGER]
InvisibleMs = Annotated[int, Field(ge=_LIMITS.min_invisible_ms, le=_LIMITS.max_invisible_ms), JSON_INTEGER]
WaitMs = Annotated[int, Field(ge=0, le=_LIMITS.max_wait_ms), JSON_INTEGER]


class ReceiveIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_messages: MaxMessages = Field(32, description="Messages to hand out at most: 1..32.")
    invisible_ms: InvisibleMs = Field(
        30_000, description="How long each message stays invisible to the group's other receives, ms."
    )
    wait_ms: WaitMs = Field(
        0, description="Long poll: how long to wait for a message when none is ready, ms."
    )
    tags: str | None = Field(
        None,
        max_length=1024,
        description="Tag filter (RocketMQ's expression: 'TagA || TagB', '*' = all). A group should "
        "keep one filter: messages it skips are done for the group.",
    )


class PopMessageOut(MessageOut):
    receipt_handle: str = Field(description="Ack or change the invisible time with this handle.")
    delivery_attempt: int = Field(description="1 on the first delivery, + 1 on each redelivery.")
    invisible_until_ms: int = Field(description="When the message becomes visible again if not acked.")
    broker: str | None = Field(None, description="Cluster mode: the broker that handed it out.")

    @classmethod
    def received(
        cls, view: MessageView, handle: str, attempt: int, until_ms: int, broker: str | None
    ) -> PopMessageOut:
        return cls(
            **MessageOut.of(view).model_dump(),
            receipt_handle=handle,
            delivery_attempt=attempt,
            invisible_until_ms=until_ms,
            broker=broker,
        )


class ReceiveOut(BaseModel):
    group: str
    topic: str
    messages: list[PopMessageOut]


class AckIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    receipt_handles: list[str] = Field(min_length=1, max_length=1024, description="Handles to ack (1..1024).")


class AckResultOut(BaseModel):
    receipt_handle: str
    ok: bool
    error: str | None = Field(
        None,
        description="Why this handle was not acked: invalid_receipt_handle (404: malformed or "
        "not issued by this broker), receipt_handle_expired (409: acked, redelivered or changed "
        "since), receipt_handle_mismatch (404: another group's), broker_unavailable (retriable).",
    )
    status: int | None = Field(None, description="The HTTP status this handle alone would get.")
    message: str | None = None


class AckOut(BaseModel):
    group: str
    results: list[AckResultOut] = Field(description="One per handle, in the request's order.")
    acked: int


class ChangeInvisibleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    receipt_handle: str = Field(min_length=1, max_length=8192)
    invisible_ms: InvisibleMs = Field(
        description="New invisible time from now, ms; the old handle stops working."
    )


class ChangeInvisibleOut(BaseModel):
    group: str
    receipt_handle: str = Field(description="The new handle (the one sent is no longer valid).")
    delivery_attempt: int
    invisible_until_ms: int
    msg_id: str
