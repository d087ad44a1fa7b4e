"""The lean SSE response behaves as sse-starlette's own, with one helper task instead of four:
the same bytes, a disconnect closes the body (so the turn is cancelled) and the response ends
quietly, keep-alive pings keep coming, a client that stops reading is gone after the send
timeout (for an event and for a ping), and a server shutdown ends the stream. Each invariant
runs against both classes, so a difference is a failure."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sse_starlette.sse
from sse_starlette import EventSourceResponse
from sse_starlette.sse import AppStatus, SendTimeoutError
from starlette.types import Message

from app.api.sse import LeanEventSourceResponse

RESPONSES = [
    pytest.param(EventSourceResponse, id="sse-starlette"),
    pytest.param(LeanEventSourceResponse, id="lean"),
]
SCOPE: dict[str, Any] = {"type": "http", "method": "POST", "path": "/v1/chat", "headers": []}
PING = re.compile(rb"^: ping - \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+\+00:00\r\n\r\n$")
WAIT_SECONDS = 5.0


class Client:
    """The ASGI side of one response: records what is sent; can stop reading or leave."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.gone = asyncio.Event()
        self.stalled = False
        self.changed = asyncio.Event()

    async def receive(self) -> Message:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if self.stalled and message["type"] == "http.response.body":
            await asyncio.Event().wait()  # a client that stopped reading: the write never ends
        self.sent.append(message)
        self.changed.set()

    @property
    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]

    def pings(self) -> int:
        return sum(1 for body in self.bodies if body.startswith(b":"))

    async def until(self, condition: Any) -> None:
        async with asyncio.timeout(WAIT_SECONDS):
            while not condition():
                self.changed.clear()
                await self.changed.wait()


class Body:
    """An event body: yields its items, then waits (an idle turn) until closed."""

    def __init__(self, *items: bytes) -> None:
        self.items = items
        self.closed = False

    async def __call__(self) -> AsyncIterator[bytes]:
        try:
            for item in self.items:
                yield item
            await asyncio.Event().wait()
        finally:
            self.closed = True


@pytest.fixture(autouse=True)
def fresh_shutdown_state(monkeypatch: pytest.MonkeyPatch) -> None:
    # sse-starlette keeps one shutdown watcher per thread; each test runs its own event loop.
    monkeypatch.setattr(sse_starlette.sse, "_thread_state", threading.local())
    monkeypatch.setattr(AppStatus, "should_exit", False)


async def test_the_same_bytes_and_headers() -> None:
    async def finite() -> AsyncIterator[bytes]:
        yield b"event: start\r\ndata: {}\r\n\r\n"
        yield b'event: delta\r\ndata: {"text":"hi"}\r\n\r\n'

    sent = []
    for response_class in (EventSourceResponse, LeanEventSourceResponse):
        client = Client()
        response = response_class(finite(), ping=15, headers={"Cache-Control": "no-store"})
        await response(SCOPE, client.receive, client.send)
        sent.append(client.sent)
    assert sent[0] == sent[1]
    assert sent[1][-1] == {"type": "http.response.body", "body": b"", "more_body": False}


@pytest.mark.parametrize("response_class", RESPONSES)
async def test_a_disconnect_closes_the_body_and_ends_quietly(
    response_class: type[EventSourceResponse],
) -> None:
    client, body = Client(), Body(b"data: 1\r\n\r\n")
    response = response_class(body(), ping=15, send_timeout=30)
    serving = asyncio.create_task(response(SCOPE, client.receive, client.send))
    await client.until(lambda: len(client.bodies) == 1)
    client.gone.set()
    async with asyncio.timeout(WAIT_SECONDS):
        await serving  # returns normally: no error for the ASGI server to log
    assert body.closed


@pytest.mark.parametrize("response_class", RESPONSES)
async def test_pings_keep_coming_while_the_body_is_idle(
    response_class: type[EventSourceResponse],
) -> None:
    client, body = Client(), Body()
    response = response_class(body(), ping=0.02, send_timeout=30)
    serving = asyncio.create_task(response(SCOPE, client.receive, client.send))
    await client.until(lambda: client.pings() >= 3)
    assert all(PING.match(b) for b in client.bodies), client.bodies
    client.gone.set()
    async with asyncio.timeout(WAIT_SECONDS):
        await serving
    assert body.closed


@pytest.mark.parametrize("response_class", RESPONSES)
@pytest.mark.parametrize("stalls_on", ["event", "ping"])
async def test_a_client_that_stops_reading_is_gone_after_the_send_timeout(
    response_class: type[EventSourceResponse], stalls_on: str
) -> None:
    client = Client()
    client.stalled = True
    body = Body(b"data: 1\r\n\r\n") if stalls_on == "event" else Body()
    ping = 15 if stalls_on == "event" else 0.02
    response = response_class(body(), ping=ping, send_timeout=0.05)
    with pytest.raises(SendTimeoutError):
        async with asyncio.timeout(WAIT_SECONDS):
            await response(SCOPE, client.receive, client.send)
    assert body.closed


@pytest.mark.parametrize("response_class", RESPONSES)
async def test_a_server_shutdown_ends_the_stream(
    response_class: type[EventSourceResponse],
) -> None:
    client, body = Client(), Body(b"data: 1\r\n\r\n")
    response = response_class(body(), ping=15, send_timeout=30)
    serving = asyncio.create_task(response(SCOPE, client.receive, client.send))
    await client.until(lambda: len(client.bodies) == 1)
    AppStatus.should_exit = True  # what uvicorn's exit handler sets (patched by sse-starlette)
    async with asyncio.timeout(WAIT_SECONDS):
        await serving
    assert body.closed


async def test_an_idle_lean_stream_keeps_one_helper_task() -> None:
    client, body = Client(), Body(b"data: 1\r\n\r\n")
    before = asyncio.all_tasks()
    response = LeanEventSourceResponse(body(), ping=15, send_timeout=30)
    serving = asyncio.create_task(response(SCOPE, client.receive, client.send))
    await client.until(lambda: len(client.bodies) == 1)
    helpers = [
        task
        for task in asyncio.all_tasks() - before - {serving}
        if task.get_coro().__qualname__ != "_shutdown_watcher"  # one per event loop, shared
    ]
    assert len(helpers) == 1, helpers  # the disconnect listener; the ping is a timer
    client.gone.set()
    async with asyncio.timeout(WAIT_SECONDS):
        await serving
    await asyncio.wait(helpers, timeout=WAIT_SECONDS)
    assert helpers[0].done()  # the listener does not outlive its response
