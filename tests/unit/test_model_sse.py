"""Reading the model's event stream without the SDK's chunk models: the same events, data and
errors as the SDK's own decoder gives, so the turn sees exactly what it saw through the SDK."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.agent.model_sse import StreamError, chunks, event_data


async def lines_of(*lines: str) -> AsyncIterator[str]:
    for line in lines:
        yield line


def collect(stream: AsyncIterator[Any]) -> list[Any]:
    async def run() -> list[Any]:
        return [item async for item in stream]

    return asyncio.run(run())


def test_event_data_follows_the_event_stream_rules() -> None:
    """Comments and other fields are read past, multi-line data is joined by newlines, the
    optional space after the colon is dropped once, an event without data is skipped, and a
    last event without its blank line still counts."""
    stream = lines_of(
        ": keep-alive",
        "",
        "event: message",
        "id: 7",
        "data: one",
        "",
        "retry: 10",
        "",
        "data:two",
        "data:  three",
        "",
        "data: last",
    )
    assert collect(event_data(stream)) == ["one", "two\n three", "last"]


def test_chunks_stop_at_done_and_read_the_rest() -> None:
    """JSON chunks up to `[DONE]`; whatever follows is consumed (the connection stays usable)
    but not parsed."""
    read: list[str] = []

    async def lines() -> AsyncIterator[str]:
        for line in ('data: {"a": 1}', "", "data: [DONE]", "", "data: not json", ""):
            read.append(line)
            yield line

    assert collect(chunks(lines())) == [{"a": 1}]
    assert len(read) == 6


def test_an_error_event_raises() -> None:
    """A chunk carrying `error` ends the stream with StreamError (the SDK raises APIError)."""
    stream = lines_of('data: {"choices": []}', "", 'data: {"error": {"message": "x"}}', "")
    with pytest.raises(StreamError):
        collect(chunks(stream))


def test_a_chunk_that_is_not_json_raises() -> None:
    """Malformed data fails the round as it did through the SDK (a JSON decode error)."""
    with pytest.raises(ValueError):
        collect(chunks(lines_of("data: {oops", "")))
