"""The SSE layer of a turn: one encoder (`sse_data`) for every stream's messages, and the response
around them.

Every stream of the service (`/v1/chat`'s events, the UI message stream, OpenAI's chunks) is a
plain Starlette `Response` (`EventStreamResponse`) over bytes that `sse_data` framed: one path,
one escaping. sse-starlette's `EventSourceResponse` was measured against it (four tasks per
response, about 24 KiB of an idle stream's Python objects against 6 KiB; docs/performance.md)
and stays a test dependency only: tests/unit/test_sse_response.py holds this response to its
bytes and rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncGenerator, Mapping
from datetime import UTC, datetime

import anyio
from starlette.datastructures import MutableHeaders
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from app.agent.events import TurnEvent

# Keep-alive comments for proxies that close idle connections; a client that stops reading for
# longer than SEND_TIMEOUT_SECONDS is treated as gone (the turn is cancelled, nothing committed).
PING_SECONDS = 15
SEND_TIMEOUT_SECONDS = 30.0
# How long the body's own cleanup (the turn's cancellation) may take once the response ends.
CLEANUP_SECONDS = 30.0


class SendTimeoutError(TimeoutError):
    """A send that did not finish within the response's send timeout: the client stopped
    reading, and the turn was cancelled."""


async def send_within(send: Send, message: Message, seconds: float | None) -> None:
    """One `send` that raises `SendTimeoutError` past `seconds` (None: no bound): a client that
    stops reading holds a response no longer than that."""
    with anyio.move_on_after(seconds) as waited:
        await send(message)
    if waited.cancelled_caught:
        raise SendTimeoutError


class StreamTooLongError(TimeoutError):
    """A response still sending at its `max_seconds` (STREAM_MAX_SECONDS): a client reading
    too slowly. The body was closed (the turn cancelled) and the response ends short."""


class EventStreamResponse(Response):
    """A `text/event-stream` response of already framed events, with sse-starlette's headers,
    keep-alive pings, send timeout, a bound on its whole duration (`max_seconds`, raising
    `StreamTooLongError` once the body is closed) and disconnect handling, built on Starlette's
    `Response`.

    sse-starlette's `EventSourceResponse` runs a task group of four tasks per response (the
    stream, the ping loop, the disconnect listener and a shutdown listener), each with its
    cancel scope and frames, which an idle stream holds for as long as the turn waits for its
    model (docs/performance.md). Here the stream runs in the request's own task inside one
    cancel scope; one task waits for the disconnect; the ping is a timer that starts a short
    task only to send. A disconnect or a failed ping send cancels the scope, which closes the
    body (so the turn is cancelled); a send that does not finish within `send_timeout` raises
    `SendTimeoutError` once the body is closed. A server shutdown is the server's own: uvicorn
    lets open responses run for its graceful-shutdown timeout (`python -m app serve` sets one),
    then cancels their tasks, which closes the body the same way. An empty chunk ends the
    body early: the iterator is closed after the body's end, so what it does as it closes (a
    turn's bookkeeping) does not keep the client waiting."""

    media_type = "text/event-stream"

    def __init__(
        self,
        content: AsyncGenerator[bytes, None],
        *,
        ping: float = PING_SECONDS,
        send_timeout: float | None = None,
        max_seconds: float | None = None,
        sep: str = "\r\n",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.body_iterator = content
        self.status_code = 200
        self.background = None
        self.ping_seconds = ping
        self.send_timeout = send_timeout
        self.max_seconds = max_seconds
        self.sep = sep
        merged = MutableHeaders()
        merged.update(headers or {})
        merged.setdefault("Cache-Control", "no-store")
        merged["Connection"] = "keep-alive"
        merged["X-Accel-Buffering"] = "no"  # nginx: pass each event on as it comes
        self.init_headers(merged)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stop = _Stop()
        listener = asyncio.get_running_loop().create_task(self._listen(receive, stop))
        deadline = math.inf if self.max_seconds is None else anyio.current_time() + self.max_seconds
        try:
            with anyio.CancelScope(deadline=deadline) as cancel_scope:
                stop.scope = cancel_scope
                self._arm_ping(send, stop)
                await self._stream(send, stop)
        finally:
            stop.end()
            listener.cancel()
        if stop.failure is not None:
            raise stop.failure
        if cancel_scope.cancelled_caught and anyio.current_time() >= deadline:
            raise StreamTooLongError

    async def _stream(self, send: Send, stop: _Stop) -> None:
        start = {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
        try:
            await self._send(send, start, stop)
            async for chunk in self.body_iterator:
                if not chunk:
                    break  # the body ends here; closing the iterator (below) finishes its work
                await self._send(send, _body(chunk, more=True), stop)
            await self._send(send, _body(b"", more=False), stop)
        finally:
            stop.ended = True  # no ping after the end, nor in place of an event cut short
            # The body may be suspended at a yield (a send cut short): close it here, so its
            # cleanup (the turn's cancellation) runs before the response returns.
            with anyio.move_on_after(CLEANUP_SECONDS, shield=True):
                await self.body_iterator.aclose()

    async def _send(self, send: Send, message: Message, stop: _Stop) -> None:
        """One send under the lock a ping shares, within `send_timeout`."""
        async with stop.lock:
            if stop.ended:
                return
            await send_within(send, message, self.send_timeout)

    async def _listen(self, receive: Receive, stop: _Stop) -> None:
        try:
            await wait_for_disconnect(receive)
        except Exception as error:
            stop.fail(error)
        else:
            stop.cancel()

    def _arm_ping(self, send: Send, stop: _Stop) -> None:
        if self.ping_seconds > 0 and not stop.ended:
            stop.timer = asyncio.get_running_loop().call_later(
                self.ping_seconds, self._ping_due, send, stop
            )

    def _ping_due(self, send: Send, stop: _Stop) -> None:
        stop.timer = None
        stop.pinging = asyncio.get_running_loop().create_task(self._ping(send, stop))

    async def _ping(self, send: Send, stop: _Stop) -> None:
        """One keep-alive comment, framed as sse-starlette frames its own."""
        try:
            comment = f": ping - {datetime.now(UTC)}{self.sep}{self.sep}".encode()
            await self._send(send, _body(comment, more=True), stop)
        except Exception as error:
            stop.fail(error)
            return
        finally:
            stop.pinging = None
        self._arm_ping(send, stop)


class _Stop:
    """What ends one response early, and the helpers to stop when it ends."""

    __slots__ = ("ended", "failure", "lock", "pinging", "scope", "timer")

    def __init__(self) -> None:
        self.scope: anyio.CancelScope | None = None
        self.failure: Exception | None = None
        self.ended = False
        self.lock = asyncio.Lock()  # a ping never interleaves with an event's bytes
        self.timer: asyncio.TimerHandle | None = None
        self.pinging: asyncio.Task[None] | None = None

    def cancel(self) -> None:
        if self.scope is not None:
            self.scope.cancel()

    def fail(self, error: Exception) -> None:
        if self.failure is None:
            self.failure = error
        self.cancel()

    def end(self) -> None:
        self.scope = None  # a disconnect noticed after the end has nothing left to cancel
        if self.timer is not None:
            self.timer.cancel()
        if self.pinging is not None:
            self.pinging.cancel()


def _body(chunk: bytes, *, more: bool) -> Message:
    return {"type": "http.response.body", "body": chunk, "more_body": more}


async def wait_for_disconnect(receive: Receive) -> None:
    """Return once the client has gone (a request's body has been read by then)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def sse_data(payload: str, *, event: str | None = None, sep: str = "\n") -> bytes:
    """One SSE message whose data is `payload`: compact JSON (`json_text`) or a marker such as
    `[DONE]`, always one line. JSON escapes every control character but leaves U+0085, U+2028
    and U+2029 raw under ensure_ascii=False, and line readers that split like str.splitlines
    (httpx's among them) end a line there: they are escaped too, so that stored text (a
    `sources` event's memory entries, a model's answer) never splits `data`. They can only
    occur inside a JSON string, where the \\uXXXX escape decodes to the same text."""
    data = payload.translate(_LINE_BREAKS_JSON_KEEPS)
    name = f"event: {event}{sep}" if event is not None else ""
    return f"{name}data: {data}{sep}{sep}".encode()


def json_text(value: object) -> str:
    """Compact JSON, characters kept as they are (`sse_data` escapes the line breaks)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


_LINE_BREAKS_JSON_KEEPS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def encode_event(event: TurnEvent) -> bytes:
    """One event of `/v1/chat`, framed as sse-starlette would frame it (the name is one of ours)."""
    return sse_data(json_text(event.data()), event=event.name, sep="\r\n")


async def _encoded(
    batches: AsyncGenerator[tuple[TurnEvent, ...], None],
) -> AsyncGenerator[bytes, None]:
    # One write per batch of events that were ready together (bytes go out as they are); the
    # empty batch after `done` becomes the empty chunk that ends the body. Closing this
    # generator closes the turn's stream too: on a disconnect, that cancels the turn.
    async with contextlib.aclosing(batches) as stream:
        async for batch in stream:
            yield b"".join(encode_event(event) for event in batch)


def event_stream_response(
    batches: AsyncGenerator[tuple[TurnEvent, ...], None], *, max_seconds: float
) -> EventStreamResponse:
    return EventStreamResponse(
        _encoded(batches),
        ping=PING_SECONDS,
        send_timeout=SEND_TIMEOUT_SECONDS,
        max_seconds=max_seconds,
        headers={"Cache-Control": "no-store"},
    )
