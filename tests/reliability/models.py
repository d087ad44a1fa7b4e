"""A model for the reliability suite: each turn stages a two-operation batch, then streams a
short answer whose last chunk can be held at a gate that the test opens.

The batch spans both documents (one `user` entry, one `memory` entry), so "all or nothing" is
observable in storage. The gate sits just before the model's final chunk, the last point before
the service commits: a client that disconnects while its turn is held there has provably gone
before the commit began, with no timing assumption.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

import httpx

from app.offline.transport import AsyncIteratorStream
from app.offline.wire import ChatRequest, Text, ToolCall, ToolCalls, completion_body, stream_body
from tests.support.gates import Gates
from tests.support.scripted import HttpError, Reply, error_body

FINAL_TEXT = "Saved. Both notes are kept for later turns."
_KEY = re.compile(r"\bpair (?P<key>[A-Za-z0-9-]+)")


def pair_entries(key: str) -> tuple[str, str]:
    """The (user, memory) entries a turn for `key` stages."""
    return f"Pair {key} likes green tea.", f"Pair {key} project deploys on Tuesdays."


def pair_message(key: str) -> str:
    return f"please save pair {key}"


def turn_key(request: ChatRequest) -> str | None:
    for message in reversed(request.messages):
        if message.get("role") == "user":
            found = _KEY.search(str(message.get("content") or ""))
            return found.group("key") if found else None
    return None


def pair_reply(request: ChatRequest) -> Reply:
    """First round: stage the pair (when the memory tool is offered); then the final text."""
    last = request.messages[-1] if request.messages else {}
    if last.get("role") == "tool":
        return Text(FINAL_TEXT)
    key = turn_key(request)
    if key is None:
        return HttpError(400, "no pair key in the message")
    if "memory_update" not in request.tool_names:
        return Text(FINAL_TEXT)
    user, memory = pair_entries(key)
    arguments = {
        "operations": [
            {"target": "user", "action": "add", "content": user},
            {"target": "memory", "action": "add", "content": memory},
        ]
    }
    return ToolCalls((ToolCall("memory_update", json.dumps(arguments), "call_pair_1"),))


def _finishes(chunk: bytes) -> bool:
    payload = chunk.removeprefix(b"data: ").strip()
    if not payload.startswith(b"{"):
        return False
    choices = json.loads(payload).get("choices") or []
    return any(choice.get("finish_reason") for choice in choices)


class PairModelTransport(httpx.AsyncBaseTransport):
    """`pair_reply` over the offline model's wire format; with `gates`, a turn's final answer
    stops before its finishing chunk until the test releases that turn's gate."""

    def __init__(self, *, gates: Gates | None = None, delay_seconds: float = 0.0) -> None:
        self.gates = gates
        self.delay_seconds = delay_seconds

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        chat = ChatRequest.from_body(json.loads(await request.aread()))
        reply = pair_reply(chat)
        if isinstance(reply, HttpError):
            return httpx.Response(reply.status, json=error_body(reply))
        assert isinstance(reply, Text | ToolCalls)
        if not chat.stream:
            return httpx.Response(200, json=completion_body(chat, reply))
        key = turn_key(chat)
        gates = self.gates if isinstance(reply, Text) else None

        async def chunks() -> AsyncIterator[bytes]:
            async for chunk in stream_body(chat, reply, self.delay_seconds):
                if gates is not None and key is not None and _finishes(chunk):
                    await gates.wait(key)
                yield chunk

        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=AsyncIteratorStream(chunks())
        )
