"""The SSE layer of a turn: one `encode_event()` for every event, and the response around it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator

from sse_starlette import EventSourceResponse

from app.agent.events import TurnEvent

# Keep-alive comments for proxies that close idle connections; a client that stops reading for
# longer than SEND_TIMEOUT_SECONDS is treated as gone (the turn is cancelled, nothing committed).
PING_SECONDS = 15
SEND_TIMEOUT_SECONDS = 30.0


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
    return EventSourceResponse(
        _encoded(batches),
        ping=PING_SECONDS,
        send_timeout=SEND_TIMEOUT_SECONDS,
        headers={"Cache-Control": "no-store"},
    )
