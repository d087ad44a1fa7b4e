"""Scripted models for tests: replies served in order through the real in-process transport.

Each step is a reply (`Text`, `ToolCalls`, `HttpError`, `BrokenStream`, `Hang`) or a function of
the request returning one (sync or async, e.g. to wait for a concurrent request). Every request
is recorded, so tests can read the system prompt the model saw. A call with no step left is an
unexpected call: it is answered with an HTTP 500 (the turn fails) and `assert_done()` reports it
together with any unconsumed steps.
"""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from app.agent.offline import (
    AsyncIteratorStream,
    BrokenStream,
    ChatCompletionsTransport,
    ChatRequest,
    Hang,
    HttpError,
    Reply,
    Text,
    ToolCall,
    ToolCalls,
    stream_body,
)
from app.main import create_app
from app.settings import Settings
from tests.support.gates import Gates
from tests.support.server import live_server

__all__ = [
    "BrokenStream",
    "Hang",
    "HeldText",
    "HttpError",
    "ScriptedModel",
    "Text",
    "ToolCall",
    "ToolCalls",
    "memory_call",
    "routed_transport",
    "serve_with_model",
]



@dataclass(frozen=True)
class HeldText:
    """Streams `text` like `Text`, but waits at `gates` (key `key`) before the finishing chunk:
    the model would complete the answer once the test opens the gate."""

    text: str
    gates: Gates
    key: str


Step = Reply | HeldText | Callable[[ChatRequest], Reply | HeldText | Awaitable[Reply | HeldText]]


def _finishes(chunk: bytes) -> bool:
    payload = chunk.removeprefix(b"data: ").strip()
    if not payload.startswith(b"{"):
        return False
    return any(choice.get("finish_reason") for choice in json.loads(payload).get("choices") or [])


class ScriptedTransport(ChatCompletionsTransport):
    """The offline model's wire format for scripted replies, `HeldText` included."""

    async def respond(self, chat: ChatRequest, reply: Any) -> httpx.Response:
        if not isinstance(reply, HeldText):
            return await super().respond(chat, reply)
        held = reply

        async def chunks() -> AsyncIterator[bytes]:
            async for chunk in stream_body(chat, Text(held.text), self.delay_seconds):
                if _finishes(chunk):
                    await held.gates.wait(held.key)
                yield chunk

        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              stream=AsyncIteratorStream(chunks()))


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

    async def __call__(self, request: ChatRequest) -> Reply | HeldText:
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
    def remaining(self) -> int:
        return len(self._steps)

    @property
    def calls(self) -> int:
        return len(self.requests)

    def system_prompts(self) -> list[str]:
        return [request.system_text() for request in self.requests]

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
def serve_with_model(settings: Settings, model: ScriptedModel | None = None,
                     *, transport: ChatCompletionsTransport | None = None) -> Iterator[str]:
    """The app behind real uvicorn, its model replaced by a script (or the offline model)."""
    if transport is None and model is not None:
        transport = model.transport()
    with live_server(create_app(settings, model_transport=transport)) as url:
        yield url
