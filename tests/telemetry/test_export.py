"""OTLP/HTTP export: on when an endpoint is set, flushed at shutdown, redacted on the wire."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from starlette.types import Receive, Scope, Send

from app.main import create_app
from app.telemetry import captured_spans, start_span
from app.telemetry.tracing import WhileRecording
from tests.support.apps import api_settings
from tests.support.server import live_server
from tests.support.tokens import dev_token

SECRET = "SNTL-EXP-3T8-export-WALRUS-44"


@pytest.fixture
def collector() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    """A loopback OTLP/HTTP endpoint that records what it receives."""
    received: list[tuple[str, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            received.append((self.path, body))
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def test_spans_are_exported_over_otlp_http_and_redacted(
    sqlite_url: str,
    collector: tuple[str, list[tuple[str, bytes]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With OTEL_EXPORTER_OTLP_ENDPOINT set, the turn's spans reach the collector by the end of
    the lifespan (shutdown flushes), with the service resource, and without message content or
    headers even when header capture is requested through the environment."""
    endpoint, received = collector
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_REQUEST", ".*")
    app = create_app(api_settings(sqlite_url, log_level="DEBUG"))
    token = dev_token("exporter")
    with live_server(app) as base:
        response = httpx.post(
            f"{base}/v1/chat",
            json={"message": f"Hello {SECRET}"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert response.status_code == 200 and "event: done" in response.text
    paths = {path for path, _ in received}
    assert paths == {"/v1/traces"}
    payload = b"".join(body for _, body in received)
    assert b"chat.turn" in payload and b"llm.round" in payload and b"POST /v1/chat" in payload
    assert b"service.name" in payload
    assert SECRET.encode() not in payload
    assert token.encode() not in payload
    assert b"authorization" not in payload.lower()


def test_the_instrumentation_runs_only_while_spans_are_received(sqlite_url: str) -> None:
    """Without an exporter or a capture a request skips the instrumentation's layers; once a
    capture is added the very next request goes through them (and has its server span); after
    it is removed requests skip them again."""
    app = create_app(api_settings(sqlite_url))
    with live_server(app) as base:
        assert httpx.get(f"{base}/healthz").status_code == 200
        stack = app.middleware_stack
        assert isinstance(stack, WhileRecording)
        instrumented, calls = stack.instrumented, []

        def counting(scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
            calls.append(scope["type"])
            return instrumented(scope, receive, send)

        stack.instrumented = counting
        assert httpx.get(f"{base}/healthz").status_code == 200
        assert calls == []
        with captured_spans() as exporter:
            assert httpx.get(f"{base}/healthz").status_code == 200
        assert calls == ["http"]
        assert any(span.kind == SpanKind.SERVER for span in exporter.get_finished_spans())
        assert httpx.get(f"{base}/healthz").status_code == 200
        assert calls == ["http"]


def test_our_spans_are_started_only_while_spans_are_received() -> None:
    """`start_span` is the invalid span, leaving the current span as it was, while nothing
    receives spans, and a recorded span (current inside it) while a capture does."""
    tracer = trace.get_tracer("app.test")
    with start_span(tracer, "app.idle") as span:
        assert span is trace.INVALID_SPAN
        assert trace.get_current_span() is trace.INVALID_SPAN
    with captured_spans() as exporter, start_span(tracer, "app.seen") as span:
        assert span.is_recording()
        assert trace.get_current_span() is span
    assert [finished.name for finished in exporter.get_finished_spans()] == ["app.seen"]
