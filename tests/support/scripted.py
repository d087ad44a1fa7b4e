"""Scripted models for tests: replies served in order through the real in-process transport.

Each step is a reply (`Text`, `ToolCalls`, and the failure modes only tests need: `HttpError`,
`BrokenStream`, `Hang`, `HeldText`) or a function of
the request returning one (sync or async, e.g. to wait for a concurrent request). Every request
is recorded, so tests can read the system prompt the model saw. A call with no step left is an
unexpected call: it is answered with an HTTP 500 (the turn fails) and `assert_done()` reports it
together with any unconsumed steps.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from app.main import create_app
from app.offline.transport import AsyncIteratorStream, ChatCompletionsTransport
from app.offline.wire import ChatRequest, Text, ToolCall, ToolCalls, stream_body
from app.settings import Settings
from tests.support.gates import Gates
from tests.support.server import live_server

__all__ = [
    "BrokenStream",
    "Hang",
    "HeldText",
    "HttpError",
    "Reply",
    "ScriptedModel",
    "Text",
    "ToolCall",
    "ToolCalls",
    "memory_call",
    "routed_transport",
    "serve_with_model",
]


@dataclass(frozen=True)
class HttpError:
    status: int = 500
    message: str = "scripted upstream failure"


@dataclass(frozen=True)
class BrokenStream:
    """Streams `text` word by word, then the connection breaks (no finish, no [DONE])."""

    text: str = ""


@dataclass(frozen=True)
class Hang:
    """Never answers: the caller's timeout or cancellation must end the request."""


@dataclass(frozen=True)
class HeldText:
    """Streams `text` like `Text`, but waits at `gates` (key `key`) before the finishing chunk:
    the model would complete the answer once the test opens the gate."""

    text: str
    gates: Gates
    key: str


Reply = Text | ToolCalls | HttpError | BrokenStream | Hang | HeldText
Step = Reply | Callable[[ChatRequest], Reply | Awaitable[Reply]]


def error_body(reply: HttpError) -> dict[str, Any]:
    return {"error": {"message": reply.message, "type": "server_error", "code": None}}


def _finishes(chunk: bytes) -> bool:
    payload = chunk.removeprefix(b"data: ").strip()
    if not payload.startswith(b"{"):
        return False
    return any(choice.get("finish_reason") for choice in json.loads(payload).get("choices") or [])


class ScriptedTransport(ChatCompletionsTransport):
    """The offline model's wire format for scripted replies, the test-only failures included."""

    async def respond(self, chat: ChatRequest, reply: Any) -> httpx.Response:
        if isinstance(reply, Hang):
            await asyncio.Event().wait()  # until the caller gives up
            raise AssertionError("unreachable")
        if isinstance(reply, HttpError):
            return httpx.Response(reply.status, json=error_body(reply))
        if isinstance(reply, BrokenStream):
            if not chat.stream:
                raise httpx.RemoteProtocolError("scripted: the connection broke")
            return self._streamed(self._broken(chat, reply))
        if isinstance(reply, HeldText):
            return self._streamed(self._held(chat, reply))
        return await super().respond(chat, reply)

    @staticmethod
    def _streamed(chunks: AsyncIterator[bytes]) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=AsyncIteratorStream(chunks)
        )

    async def _broken(self, chat: ChatRequest, reply: BrokenStream) -> AsyncIterator[bytes]:
        """The text's chunks without their finish, then the connection breaks."""
        async for chunk in stream_body(chat, Text(reply.text), self.delay_seconds):
            if _finishes(chunk):
                raise httpx.RemoteProtocolError("scripted: the stream broke midway")
            yield chunk

    async def _held(self, chat: ChatRequest, held: HeldText) -> AsyncIterator[bytes]:
        async for chunk in stream_body(chat, Text(held.text), self.delay_seconds):
            if _finishes(chunk):
                await held.gates.wait(held.key)
            yield chunk


def memory_call(*operations: Mapping[str, Any], call_id: str = "call_1", **extra: Any) -> ToolCalls:
    """A `memory_update` call with these operations (extra top-level arguments allowed)."""
    arguments = {"operations": [dict(operation) for operation in operations], **extra}
    return ToolCalls((ToolCall("memory_update", json.dumps(arguments), call_id),))


class ScriptedModel:
    def __init__(self, steps: Iterable[Step] = (), *, name: str = "scripted") -> None:
        self.name = name
        self._steps = list(steps)
        self._lock = threading.Lock()
        self.requests: list[ChatRequest] = []
        self.unexpected: list[ChatRequest] = []

    async def __call__(self, request: ChatRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            if not self._steps:
                self.unexpected.append(request)
                return HttpError(500, f"{self.name}: unexpected call #{len(self.requests)}")
            step = self._steps.pop(0)
        if callable(step):
            reply = step(request)
            if inspect.isawaitable(reply):
                reply = await reply
            return reply
        return step

    @property
    def calls(self) -> int:
        return len(self.requests)

    def transport(self) -> ChatCompletionsTransport:
        return ScriptedTransport(self)  # type: ignore[arg-type]

    def assert_done(self) -> None:
        assert not self.unexpected, (
            f"{self.name}: {len(self.unexpected)} unexpected model call(s) beyond the script"
        )
        assert not self._steps, f"{self.name}: {len(self._steps)} scripted step(s) never consumed"


def routed_transport(models: Mapping[str, ScriptedModel]) -> ChatCompletionsTransport:
    """One transport serving several model names (primary and fallback); an unknown name fails."""

    async def respond(request: ChatRequest) -> Reply:
        model = models.get(request.model)
        if model is None:
            raise AssertionError(f"request for unscripted model {request.model!r}")
        return await model(request)

    return ScriptedTransport(respond)  # type: ignore[arg-type]


@contextmanager
def serve_with_model(
    settings: Settings,
    model: ScriptedModel | None = None,
    *,
    transport: ChatCompletionsTransport | None = None,
    http: type[asyncio.Protocol] | str = "auto",
) -> Iterator[str]:
    """The app behind real uvicorn (its HTTP protocol `http`), its model replaced by a script
    (or the offline model)."""
    if transport is None and model is not None:
        transport = model.transport()
    with live_server(create_app(settings, model_transport=transport), http=http) as url:
        yield url
