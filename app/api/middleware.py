"""Pure ASGI middleware: a request id on every response and a cap on request body size.

Plain ASGI callables rather than `BaseHTTPMiddleware`, which runs the app in a separate task
and breaks client-disconnect detection for streamed responses.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable

import structlog
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_ID_HEADER = "x-request-id"
OPENAI_PREFIX = "/openai/"  # errors under it carry OpenAI's `type` and `param` too
# An incoming id is echoed only when it is short and plain; anything else is replaced.
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class RequestIdMiddleware:
    """Echo a caller's `X-Request-ID` (or mint one) and bind it to log lines of the request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = Headers(scope=scope).get(REQUEST_ID_HEADER, "")
        request_id = incoming if _VALID_REQUEST_ID.match(incoming) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
            await send(message)

        # Bound for the request and reset to what it was after: the same as structlog's
        # `bound_contextvars`, without its copy of the whole context held for the response.
        tokens = structlog.contextvars.bind_contextvars(request_id=request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            structlog.contextvars.reset_contextvars(**tokens)


class BodyTooLarge(HTTPException):
    """An HTTPException so that FastAPI's body parsing re-raises it instead of answering 400."""

    def __init__(self, limit: int) -> None:
        super().__init__(status_code=413, detail=f"The request body exceeds {limit} bytes.")


class BodySizeLimitMiddleware:
    """413 for a body above `max_bytes`: at once from Content-Length, else while it streams in.

    Kept beside Starlette's own limit (`max_body_size`, Starlette 1.10 with FastAPI 0.165), which
    was measured against the contract and does not meet it: a body declared too large is
    answered `text/plain` "Content Too Large" rather than the documented JSON error
    (`payload_too_large`, in OpenAI's shape under /openai/), and a route that does not read its
    body runs to the end first (its answer replaced by the 413 as it starts): a handler with
    side effects would have them for a refused request. Here the declared length is refused
    before the app runs; tests/api/test_input_boundaries.py holds the answers."""

    def __init__(self, app: ASGIApp, *, max_bytes: int | Callable[[], int]) -> None:
        self.app = app
        self._max_bytes = max_bytes

    @property
    def max_bytes(self) -> int:
        # A callable lets the limit come from settings that are only resolved at start-up.
        return self._max_bytes() if callable(self._max_bytes) else self._max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._reject(scope, send, limit)
            return

        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            # Normally the app's error handler already answered; this covers readers outside it.
            if started:
                raise
            await self._reject(scope, send, limit)

    async def _reject(self, scope: Scope, send: Send, limit: int) -> None:
        error: dict[str, object] = {
            "code": "payload_too_large",
            "message": f"The request body exceeds {limit} bytes.",
        }
        if str(scope.get("path", "")).startswith(OPENAI_PREFIX):
            error.update(type="invalid_request_error", param=None)  # OpenAI's error shape
        body = json.dumps({"error": error}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
