"""The Vercel AI SDK UI message stream (v1) encoding of a turn. Placeholder: issue 6 implements it."""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.responses import StreamingResponse

from app.agent.events import TurnEvent

HEADER = "x-vercel-ai-ui-message-stream"


def ui_message_response(events: AsyncIterator[TurnEvent]) -> StreamingResponse:
    raise NotImplementedError
