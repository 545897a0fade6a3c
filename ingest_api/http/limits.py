"""Request body size limit as pure ASGI middleware (413 before the app sees the body).

A declared ``Content-Length`` over the limit is refused before anything is read (the HTTP
parser never delivers more than the declared length). A body without one (chunked) is read
here, counted as it streams and refused as soon as it passes the limit; otherwise it is
handed to the app whole. Refusing here, rather than from inside the app, keeps FastAPI from
turning the refusal into a generic 400 while it parses a body.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class RequestSizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(
            {"error": "request_too_large", "message": f"request body exceeds {self.max_bytes} bytes"}
        ).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if b"content-length" in headers:
            try:
                declared = int(headers[b"content-length"])
            except ValueError:
                declared = 0
            if declared > self.max_bytes:
                await self._refuse(send)
                return
            await self.app(scope, receive, send)
            return
        if b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)  # no body
            return
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.max_bytes:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        whole: Message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return whole
            return await receive()

        await self.app(scope, replay, send)
