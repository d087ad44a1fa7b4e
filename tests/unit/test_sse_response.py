"""Our SSE response behaves as sse-starlette's own with one helper task instead of four: the
same bytes and headers, a disconnect closes the body (so the turn is cancelled) and the response
ends quietly, keep-alive pings keep coming and never cut into an event, a client that stops
reading is gone after the send timeout (for an event and for a ping), one still sending at its
`max_seconds` is cut (ours only), and a server shutdown
ends the stream once the server's grace has passed. The invariants shared with sse-starlette
run against both classes, so a difference is a failure."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sse_starlette import EventSourceResponse
from starlette.responses import Response
from starlette.types import Message

from app.api.streams.sse import EventStreamResponse, StreamTooLongError
from tests.support.server import running_server

RESPONSES = [
    pytest.param(EventSourceResponse, id="sse-starlette"),
    pytest.param(EventStreamResponse, id="ours"),
]
SCOPE: dict[str, Any] = {"type": "http", "method": "POST", "path": "/v1/chat", "headers": []}
PING = re.compile(rb"^: ping - \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+\+00:00(\r\n\r\n|\n\n)$")
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
        self.closed = threading.Event()

    async def __call__(self) -> AsyncIterator[bytes]:
        try:
            for item in self.items:
                yield item
            await asyncio.Event().wait()
        finally:
            self.closed.set()


async def finite() -> AsyncIterator[bytes]:
    yield b"event: start\r\ndata: {}\r\n\r\n"
    yield b'event: delta\r\ndata: {"text":"hi"}\r\n\r\n'


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"headers": {"Cache-Control": "no-store"}}, id="chat"),
        pytest.param(
            {"headers": {"x-vercel-ai-ui-message-stream": "v1", "cache-control": "no-cache"}},
            id="ui-stream",
        ),
        pytest.param({"headers": None, "sep": "\n", "send_timeout": 30}, id="defaults"),
    ],
)
async def test_the_same_bytes_and_headers(options: dict[str, Any]) -> None:
    sent = []
    for response_class in (EventSourceResponse, EventStreamResponse):
        client = Client()
        response = response_class(finite(), ping=15, **options)
        await response(SCOPE, client.receive, client.send)
        sent.append(client.sent)
    assert sent[0] == sent[1]
    assert sent[1][-1] == {"type": "http.response.body", "body": b"", "more_body": False}


@pytest.mark.parametrize("response_class", RESPONSES)
async def test_a_disconnect_closes_the_body_and_ends_quietly(
    response_class: type[EventStreamResponse],
) -> None:
    client, body = Client(), Body(b"data: 1\r\n\r\n")
    response = response_class(body(), ping=15, send_timeout=30)
    serving = asyncio.create_task(response(SCOPE, client.receive, client.send))
    await client.until(lambda: len(client.bodies) == 1)
    client.gone.set()
    async with asyncio.timeout(WAIT_SECONDS):
        await serving  # returns normally: no error for the ASGI server to log
    assert body.closed.is_set()


@pytest.mark.parametrize("sep", ["\r\n", "\n"])
@pytest.mark.parametrize("response_class", RESPONSES)
async def test_pings_keep_coming_while_the_body_is_idle(
    response_class: type[EventStreamResponse], sep: str
) -> None:
    client, body = Client(), Body()
    response = response_class(body(), ping=0.02, send_timeout=30, sep=sep)
    serving = asyncio.create_task(response(SCOPE, client.receive, client.send))
    await client.until(lambda: client.pings() >= 3)
    assert all(PING.match(b) and b.endswith(sep.encode() * 2) for b in client.bodies)
    client.gone.set()
    async with asyncio.timeout(WAIT_SECONDS):
        await serving
    assert body.closed.is_set()


async def test_a_ping_due_during_an_event_waits_for_its_last_byte() -> None:
    """The event's send is held open while a ping falls due: the ping is sent after it, never
    inside it (both go down one connection)."""
    release = asyncio.Event()
    sending: list[bytes] = []
    overlapped: list[bytes] = []

    class SlowClient(Client):
        async def send(self, message: Message) -> None:
            body = message.get("body", b"")
            if sending:
                overlapped.append(body)
            sending.append(body)
            if body.startswith(b"data: 1"):
                # The loop fires timers in deadline order, and the ping's was armed before
                # this send began: it falls due, and its task runs, while the event is held.
                asyncio.get_running_loop().call_later(0.05, release.set)
                await release.wait()
            sending.pop()
            await super().send(message)

    client, body = SlowClient(), Body(b"data: 1\r\n\r\n")
    response = EventStreamResponse(body(), ping=0.01, send_timeout=30)
    serving = asyncio.create_task(response(SCOPE, client.receive, client.send))
    await client.until(lambda: client.pings() >= 1)
    client.gone.set()
    async with asyncio.timeout(WAIT_SECONDS):
        await serving
    assert overlapped == []
    assert client.bodies[0] == b"data: 1\r\n\r\n"


@pytest.mark.parametrize("response_class", RESPONSES)
@pytest.mark.parametrize("stalls_on", ["event", "ping"])
async def test_a_client_that_stops_reading_is_gone_after_the_send_timeout(
    response_class: type[EventStreamResponse], stalls_on: str
) -> None:
    client = Client()
    client.stalled = True
    body = Body(b"data: 1\r\n\r\n") if stalls_on == "event" else Body()
    ping = 15 if stalls_on == "event" else 0.02
    response = response_class(body(), ping=ping, send_timeout=0.05)
    with pytest.raises(TimeoutError):  # each library's SendTimeoutError is a TimeoutError
        async with asyncio.timeout(WAIT_SECONDS):
            await response(SCOPE, client.receive, client.send)
    assert body.closed.is_set()


async def test_a_stream_still_sending_at_its_longest_is_cut() -> None:
    """Invariant: `max_seconds` bounds the whole response, whatever the client reads: a body
    that goes on (a slow reader taking each event just in time) is closed at the bound and the
    response raises StreamTooLongError, never ending as if whole."""

    async def endless() -> AsyncIterator[bytes]:
        while True:
            yield b"data: 1\r\n\r\n"
            await asyncio.sleep(0.01)

    client = Client()
    body = endless()
    response = EventStreamResponse(body, ping=15, send_timeout=5, max_seconds=0.2)
    with pytest.raises(StreamTooLongError):
        async with asyncio.timeout(WAIT_SECONDS):
            await response(SCOPE, client.receive, client.send)
    assert client.sent[-1].get("more_body", True)  # the body never ended as if whole
    assert body.ag_running is False and body.ag_frame is None  # closed


@pytest.mark.parametrize("response_class", RESPONSES)
def test_a_server_shutdown_ends_the_stream(response_class: type[EventStreamResponse]) -> None:
    """uvicorn, asked to stop (as by SIGTERM), lets the open stream run for its graceful
    timeout, then cancels it: the body is closed, so the turn is cancelled."""
    body = Body(b"data: 1\r\n\r\n")
    app = FastAPI()

    @app.post("/stream")
    async def stream() -> Response:
        return response_class(body(), ping=15, send_timeout=30)

    with running_server(app, graceful_seconds=1) as (url, stop), httpx.Client() as http:
        with http.stream("POST", f"{url}/stream", timeout=WAIT_SECONDS * 2) as response:
            chunks = response.iter_raw()
            assert next(chunks) == b"data: 1\r\n\r\n"
            stopping = threading.Thread(target=stop)
            stopping.start()
            with contextlib.suppress(httpx.RemoteProtocolError):  # a stream cut short
                for _ in chunks:
                    pass
        stopping.join()
    assert body.closed.wait(WAIT_SECONDS)


async def test_an_idle_stream_keeps_one_helper_task() -> None:
    client, body = Client(), Body(b"data: 1\r\n\r\n")
    before = asyncio.all_tasks()
    response = EventStreamResponse(body(), ping=15, send_timeout=30)
    serving = asyncio.create_task(response(SCOPE, client.receive, client.send))
    await client.until(lambda: len(client.bodies) == 1)
    helpers = list(asyncio.all_tasks() - before - {serving})
    assert len(helpers) == 1, helpers  # the disconnect listener; the ping is a timer
    client.gone.set()
    async with asyncio.timeout(WAIT_SECONDS):
        await serving
    await asyncio.wait(helpers, timeout=WAIT_SECONDS)
    assert helpers[0].done()  # the listener does not outlive its response
