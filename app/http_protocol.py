"""Bounds on reading a request off the socket, before the application sees it: the request line
and headers in size (HTTP_MAX_HEADER_BYTES) and time (HTTP_HEADER_TIMEOUT_SECONDS), and the body
in time (HTTP_BODY_TIMEOUT_SECONDS); the body's size is `BodySizeLimitMiddleware`'s.

uvicorn's default HTTP parser (httptools) buffers any header whole and times out neither a slow
head nor a slow body: four 128 MiB headers took 400 MiB, a connection sending one byte a minute
was held for ever. `BoundedHttpProtocol` wraps the protocol uvicorn would use (its `auto`
choice) and follows each request's boundaries with httptools' own public parser, whose
callbacks say where a message begins, where its head ends and where it is complete; nothing
else of the request is kept. It is uvicorn's `--http` protocol class: `python -m app serve`
passes it, and `uvicorn app.main:app --http app.http_protocol:BoundedHttpProtocol` does too.

Kept after measuring what the server offers itself (uvicorn 0.55): `timeout_keep_alive` times only
the idle gap between requests, never a head or a body in flight, and no setting times either;
`h11_max_incomplete_event_size` bounds a head under the h11 parser only, which answers an oversized
head `400` where docs/api.md documents `431`, and parsed a 0.6 KiB request head with its body in
128 µs against 4.7 µs for the second parse here (httptools; means of 5,000 and 50,000 parses on one
core); `limit_concurrency` counts connections and tasks, not bytes or time. The body's size stays
`BodySizeLimitMiddleware`'s for the reasons in its docstring.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import httptools
import structlog
from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string

from app.settings import Settings, load_settings

log = structlog.get_logger(__name__)

PROTOCOL_PATH = "app.http_protocol:BoundedHttpProtocol"


def _plain_response(status: str, text: str) -> bytes:
    body = text.encode()
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"connection: close\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body


_TOO_LARGE = _plain_response(
    "431 Request Header Fields Too Large", "The request line and headers are too long."
)
_TIMED_OUT = _plain_response("408 Request Timeout", "The request head took too long to arrive.")


@dataclass(frozen=True)
class HttpLimits:
    max_header_bytes: int
    header_timeout_seconds: float
    body_timeout_seconds: float

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpLimits:
        return cls(
            max_header_bytes=settings.http_max_header_bytes,
            header_timeout_seconds=settings.http_header_timeout_seconds,
            body_timeout_seconds=settings.http_body_timeout_seconds,
        )


@functools.cache
def configured_limits() -> HttpLimits:
    """The limits of this process's environment, read once (the settings the app reads too)."""
    return HttpLimits.from_settings(load_settings())


class BoundedHttpProtocol(asyncio.Protocol):
    """uvicorn's HTTP protocol, fed only what passes the bounds. A head still incomplete past
    the size or time bound is answered `431` or `408` (on a connection's first request; later
    on, a response may still be streaming, so the connection is only closed); a body still
    incomplete past its time bound closes the connection, which the application sees as the
    client leaving (nothing of the request is committed)."""

    limits: ClassVar[HttpLimits | None] = None  # None: from the settings (a test sets its own)

    def __init__(self, **uvicorn_arguments: Any) -> None:
        inner_class = import_from_string(HTTP_PROTOCOLS["auto"])
        self.inner: asyncio.Protocol = inner_class(**uvicorn_arguments)
        self.bounds = type(self).limits or configured_limits()
        loop = uvicorn_arguments.get("_loop")
        self.loop: asyncio.AbstractEventLoop = loop or asyncio.get_event_loop()
        self.transport: asyncio.Transport | None = None
        self.parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        self.timer: asyncio.TimerHandle | None = None
        self.in_head = True  # until the first message begins, the connection awaits a head
        self.head_bytes = 0
        self.messages = 0

    # -- asyncio.Protocol, passed on to uvicorn's protocol ---------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._arm(self.bounds.header_timeout_seconds, "header")
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.parser is None or self._follow(data):
            self.inner.data_received(data)

    def _follow(self, data: bytes) -> bool:
        """Feed the request parser, an unfinished head at most up to its bound; False when
        the request was refused. Bytes after a head are fed whole: should a next message begin
        in them, all of them count towards its head (more than it has, never less)."""
        while data and self.parser is not None:
            room = self.bounds.max_header_bytes - self.head_bytes if self.in_head else len(data)
            piece, data = data[:room], data[room:]
            try:
                self.parser.feed_data(piece)
            except httptools.HttpParserUpgrade:
                self._stop_following()  # not served here; uvicorn answers it
            except httptools.HttpParserError:
                self._stop_following()  # uvicorn's own parser answers 400
            else:
                if self.in_head:
                    self.head_bytes += len(piece)
                    if data or self.head_bytes > self.bounds.max_header_bytes:
                        self._refuse(_TOO_LARGE, "header_too_large")
                        return False
        return True

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.parser = None
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    # -- httptools callbacks: where each message's head and body begin and end -----------------

    def on_message_begin(self) -> None:
        self.messages += 1
        self.in_head = True
        self._arm(self.bounds.header_timeout_seconds, "header")

    def on_headers_complete(self) -> None:
        self.in_head = False
        self._arm(self.bounds.body_timeout_seconds, "body")

    def on_message_complete(self) -> None:
        self.head_bytes = 0
        self._disarm()  # the response may take as long as it takes; uvicorn keeps alive

    # -- the bounds -----------------------------------------------------------------------------

    def _arm(self, seconds: float, part: str) -> None:
        self._disarm()
        self.timer = self.loop.call_later(seconds, self._timed_out, part)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _timed_out(self, part: str) -> None:
        self.timer = None
        if part == "header":
            self._refuse(_TIMED_OUT, "header_timeout")
        else:
            log.warning("http.request_refused", reason="body_timeout")
            self._close()

    def _refuse(self, response: bytes, reason: str) -> None:
        log.warning("http.request_refused", reason=reason)
        if self.transport is not None and self.messages <= 1 and not self.transport.is_closing():
            self.transport.write(response)
        self._close()

    def _close(self) -> None:
        self._stop_following()
        if self.transport is not None:
            self.transport.close()  # uvicorn's protocol learns of it in connection_lost

    def _stop_following(self) -> None:
        self._disarm()
        self.parser = None
