"""Pure ASGI middleware that gives each HTTP request its telemetry scope and its access event.

It binds a fresh `TelemetryScope` (the request's sensitive values and capture flag) around the
app, registers the request's own content as sensitive before any handler can log it (every
string of a JSON body except ids and enums, and the bearer token), ties the scope to the server
span, and logs one `http.request` event naming the route template, never the raw path or query.
A plain ASGI callable, not `BaseHTTPMiddleware`, so streamed responses and disconnects behave.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from typing import Any

import structlog
from opentelemetry import trace
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.telemetry import metrics
from app.telemetry.sensitive import (
    TelemetryScope,
    register_json_strings,
    register_sensitive,
    telemetry_scope,
)
from app.telemetry.tracing import link_request_scope

log = structlog.get_logger(__name__)

# Bodies above this are not inspected (the body-size middleware rejects far smaller ones).
MAX_INSPECTED_BYTES = 1_048_576
_JSON_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _capture_flag(scope: Scope) -> bool:
    app = scope.get("app")
    runtime = getattr(getattr(app, "state", None), "runtime", None)
    settings = getattr(runtime, "settings", None)
    return bool(getattr(settings, "telemetry_capture_content", False))


def register_body(body: bytes) -> None:
    """Register a request body's content strings; a malformed body still has its literals."""
    text = body.decode("utf-8", errors="replace")
    try:
        register_json_strings(json.loads(text))
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        literals: list[str] = []
        for raw in _JSON_STRING.findall(text):
            literals.append(raw)
            with contextlib.suppress(ValueError):
                literals.append(json.loads(f'"{raw}"'))
        register_sensitive(text, *literals)


class TelemetryMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_scope = TelemetryScope(
            capture_content=_capture_flag(scope),
            request_id=scope.get("state", {}).get("request_id"),
        )
        started = time.perf_counter()
        status = 500
        chunks: list[bytes] = []
        size = 0

        async def inspecting_receive() -> Message:
            nonlocal size
            message = await receive()
            if message["type"] == "http.request" and size <= MAX_INSPECTED_BYTES:
                chunk = message.get("body", b"")
                size += len(chunk)
                chunks.append(chunk)
                if not message.get("more_body", False) and size <= MAX_INSPECTED_BYTES:
                    register_body(b"".join(chunks))
                    chunks.clear()
            return message

        async def status_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        with telemetry_scope(request_scope):
            authorization = Headers(scope=scope).get("authorization", "")
            register_sensitive(authorization, authorization.partition(" ")[2])
            link_request_scope(request_scope)
            span = trace.get_current_span()
            if span.is_recording() and request_scope.request_id:
                span.set_attribute("app.request_id", request_scope.request_id)
            try:
                await self.app(scope, inspecting_receive, status_send)
            finally:
                route = _route_template(scope)
                log.info(
                    "http.request",
                    method=scope.get("method"),
                    route=route,
                    status=status,
                    duration_ms=round((time.perf_counter() - started) * 1000, 1),
                )
                metrics.http_request(scope.get("method"), route, status)


def _route_template(scope: Scope) -> str | None:
    route: Any = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else None
