"""A model for the browser tests that answers chosen messages with chosen text, at a chosen pace.

Messages listed in `answers` get their `Scripted` text, streamed word by word; a `Scripted` may
hold gates (word index -> event) where the stream waits until the test sets the event, so a test
can look at the page mid-answer without racing the stream. Every other message goes to the
built-in offline model ("remember that ...", "forget ...").
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

import httpx

from app.offline.model import OfflineModel
from app.offline.transport import AsyncIteratorStream, ChatCompletionsTransport
from app.offline.wire import ChatRequest, Text, stream_body, words

GATE_SECONDS = 60.0


@dataclass
class Scripted:
    text: str
    delay_seconds: float = 0.0
    gates: dict[int, threading.Event] = field(default_factory=dict)

    def gate(self, word_index: int) -> threading.Event:
        """An event that holds the stream before this word until the test sets it."""
        return self.gates.setdefault(word_index, threading.Event())

    def release(self) -> None:
        for gate in self.gates.values():
            gate.set()


def _last_user_text(request: ChatRequest) -> str | None:
    last = request.messages[-1] if request.messages else {}
    content = last.get("content")
    return content.strip() if last.get("role") == "user" and isinstance(content, str) else None


class ScriptedWebModel(httpx.AsyncBaseTransport):
    """The model transport: scripted answers for their messages, the offline model otherwise."""

    def __init__(self, answers: Mapping[str, Scripted]) -> None:
        self.answers = dict(answers)
        self.offline = ChatCompletionsTransport(OfflineModel())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raw = await request.aread()
        chat = ChatRequest.from_body(json.loads(raw))
        text = _last_user_text(chat)
        scripted = self.answers.get(text) if text is not None else None
        if scripted is None or not chat.stream:
            forwarded = httpx.Request(
                request.method, request.url, headers=request.headers, content=raw
            )
            return await self.offline.handle_async_request(forwarded)
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            stream=AsyncIteratorStream(self._paced(chat, scripted)),
        )

    @staticmethod
    async def _paced(chat: ChatRequest, scripted: Scripted) -> AsyncIterator[bytes]:
        # Chunk 0 is the role chunk; the chunk after it carries word 0, and so on.
        word_count = len(words(scripted.text))
        position = -1
        async for chunk in stream_body(chat, Text(scripted.text), 0.0):
            gate = scripted.gates.get(position)
            if gate is not None:
                # Tests open their gates in `finally`; the timeout only bounds a broken test.
                await asyncio.to_thread(gate.wait, GATE_SECONDS)
            if 0 < position < word_count and scripted.delay_seconds:
                await asyncio.sleep(scripted.delay_seconds)
            yield chunk
            position += 1
