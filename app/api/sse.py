"""The SSE layer of a turn: one `encode_event()` for every event, and the response around it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent

from app.agent.events import TurnEvent

# Keep-alive comments for proxies that close idle connections; a client that stops reading for
# longer than SEND_TIMEOUT_SECONDS is treated as gone (the turn is cancelled, nothing committed).
PING_SECONDS = 15
SEND_TIMEOUT_SECONDS = 30.0


def encode_event(event: TurnEvent) -> ServerSentEvent:
    return ServerSentEvent(
        event=event.name,
        data=json.dumps(event.data(), separators=(",", ":"), ensure_ascii=False),
    )


async def _encoded(events: AsyncGenerator[TurnEvent, None]) -> AsyncIterator[ServerSentEvent]:
    # Closing this generator (a disconnect) closes the turn's stream too, which cancels the turn.
    async with contextlib.aclosing(events) as stream:
        async for event in stream:
            yield encode_event(event)


def event_stream_response(events: AsyncGenerator[TurnEvent, None]) -> EventSourceResponse:
    return EventSourceResponse(
        _encoded(events),
        ping=PING_SECONDS,
        send_timeout=SEND_TIMEOUT_SECONDS,
        headers={"Cache-Control": "no-store"},
    )
