"""The model's server-sent events read without the SDK's per-chunk models: the `data` of each
event as a plain dict, decoded as the WHATWG event-stream rules (and the SDK's decoder) do."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

DONE = "[DONE]"


async def event_data(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The `data` of every event in `lines` (multi-line data joined by newlines); comments,
    `event`, `id` and `retry` fields are read past, an event without data is skipped."""
    data: list[str] = []
    pending = False
    async for line in lines:
        if not line:
            if pending:
                yield "\n".join(data)
            data, pending = [], False
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
            pending = True
    if pending:  # the stream ended without the blank line after its last event
        yield "\n".join(data)


async def chunks(lines: AsyncIterator[str]) -> AsyncIterator[Any]:
    """Each chunk as parsed JSON, up to `[DONE]` (the rest is read, so the connection can be
    reused). An event carrying `error` raises `StreamError`, as the SDK's stream does."""
    events = event_data(lines)
    async for data in events:
        if data.startswith(DONE):
            async for _rest in events:
                pass
            return
        yield _checked(json.loads(data))


def _checked(chunk: Any) -> Any:
    # A function of its own, so the suspended generator above holds no parsed chunk.
    if isinstance(chunk, dict) and chunk.get("error"):
        raise StreamError("the model sent an error event")
    return chunk


class StreamError(Exception):
    """The model reported an error inside its stream."""
