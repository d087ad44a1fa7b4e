"""The SSE layer of a turn: one `encode_event()` for every event, and the response around it."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import UTC, datetime

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.event import ensure_bytes
from sse_starlette.sse import AppStatus, _ensure_watcher_started_on_this_loop, _get_shutdown_state
from starlette.types import Receive, Scope, Send

from app.agent.events import TurnEvent

# Keep-alive comments for proxies that close idle connections; a client that stops reading for
# longer than SEND_TIMEOUT_SECONDS is treated as gone (the turn is cancelled, nothing committed).
PING_SECONDS = 15
SEND_TIMEOUT_SECONDS = 30.0


class LeanEventSourceResponse(EventSourceResponse):
    """sse-starlette's response with the same behaviour from one helper task instead of four.

    `EventSourceResponse` runs a task group of four tasks per response (the stream, the ping
    loop, the disconnect listener and a shutdown listener), each with its cancel scope and
    coroutine frames: about a fifth of what an idle stream held (docs/performance.md). Here
    the stream runs in the request's own task, inside one cancel scope; one task listens for
    the disconnect; the ping is a timer that starts a short task only to send; a server
    shutdown reaches the response through sse-starlette's own per-loop watcher, which sets
    every registered waiter. Each of those ends the stream exactly as the task group did: the
    scope is cancelled, which closes the body iterator (so the turn is cancelled), and a failed
    ping send (`SendTimeoutError` after `send_timeout`) is raised once the stream is closed.
    HEAD, websocket scopes and `data_sender_callable` keep the parent's code path."""

    _stop: _Stop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"].upper() == "HEAD"
            or self.data_sender_callable is not None
        ):
            await super().__call__(scope, receive, send)
            return
        state = _get_shutdown_state()
        stop = _Stop()
        self._stop = stop
        listener = asyncio.get_running_loop().create_task(self._listen(receive))
        try:
            with anyio.CancelScope() as cancel_scope:
                stop.scope = cancel_scope
                if AppStatus.should_exit:
                    cancel_scope.cancel()
                _ensure_watcher_started_on_this_loop()
                state.events.add(stop)  # type: ignore[arg-type]  # it only calls set()
                self._arm_ping(send)
                await self._stream_response(send)
        finally:
            self.active = False
            state.events.discard(stop)
            stop.end()
            listener.cancel()
        if stop.failure is not None:
            raise stop.failure
        if self.background is not None:
            await self.background()

    async def _listen(self, receive: Receive) -> None:
        """The parent's disconnect listener; whatever ends it ends the stream, as before."""
        try:
            await self._listen_for_disconnect(receive)
        except Exception as error:
            self._stop.fail(error)
        else:
            self._stop.set()

    def _arm_ping(self, send: Send) -> None:
        if self.ping_interval > 0 and self.active:
            self._stop.timer = asyncio.get_running_loop().call_later(
                self.ping_interval, self._ping_due, send
            )

    def _ping_due(self, send: Send) -> None:
        self._stop.timer = None
        self._stop.pinging = asyncio.get_running_loop().create_task(self._ping_once(send))

    async def _ping_once(self, send: Send) -> None:
        """One keep-alive, framed and sent as the parent's ping loop sends each of its own."""
        try:
            ping = (
                self.ping_message_factory()
                if self.ping_message_factory
                else ServerSentEvent(comment=f"ping - {datetime.now(UTC)}", sep=self.sep)
            )
            message = {"type": "http.response.body", "body": ensure_bytes(ping, self.sep)}
            async with self._send_lock:
                if self.active:
                    await self._send_with_timeout(send, {**message, "more_body": True})
        except Exception as error:
            self._stop.fail(error)
            return
        finally:
            self._stop.pinging = None
        self._arm_ping(send)


class _Stop:
    """What ends one lean response early, and the helpers to stop when it ends. Registered in
    sse-starlette's shutdown set, whose watcher calls `set()` on every member at shutdown."""

    __slots__ = ("failure", "pinging", "scope", "timer")

    def __init__(self) -> None:
        self.scope: anyio.CancelScope | None = None
        self.failure: Exception | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.pinging: asyncio.Task[None] | None = None

    def set(self) -> None:
        if self.scope is not None:
            self.scope.cancel()

    def fail(self, error: Exception) -> None:
        if self.failure is None:
            self.failure = error
        self.set()

    def end(self) -> None:
        self.scope = None  # a disconnect noticed after the end has nothing left to cancel
        if self.timer is not None:
            self.timer.cancel()
        if self.pinging is not None:
            self.pinging.cancel()


def encode_event(event: TurnEvent) -> bytes:
    """One event, framed as sse-starlette would frame it. Built directly: the name is one of
    ours and compact JSON escapes every control character, so `data` is always one line."""
    data = json.dumps(event.data(), separators=(",", ":"), ensure_ascii=False)
    return f"event: {event.name}\r\ndata: {data}\r\n\r\n".encode()


async def _encoded(
    batches: AsyncGenerator[tuple[TurnEvent, ...], None],
) -> AsyncIterator[bytes]:
    # One write per batch of events that were ready together (bytes go out as they are).
    # Closing this generator (a disconnect) closes the turn's stream too, which cancels the turn.
    async with contextlib.aclosing(batches) as stream:
        async for batch in stream:
            yield b"".join(encode_event(event) for event in batch)


def event_stream_response(
    batches: AsyncGenerator[tuple[TurnEvent, ...], None],
) -> EventSourceResponse:
    return LeanEventSourceResponse(
        _encoded(batches),
        ping=PING_SECONDS,
        send_timeout=SEND_TIMEOUT_SECONDS,
        headers={"Cache-Control": "no-store"},
    )
