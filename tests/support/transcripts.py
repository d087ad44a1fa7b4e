"""A transcript service for tests that holds the write of a turn's assistant row at a gate:
after the commit point and its `memory` event went out, before the stream ends with `done`."""

from __future__ import annotations

from sqlalchemy import Engine

from app.conversations.repository import MessageStatus, Role
from app.conversations.service import ConversationService
from app.operators.limits import SlotRelease
from app.operators.usage import TurnUsage
from tests.support.gates import Gates

GATE = "transcript"


class HeldTranscript(ConversationService):
    """Holds each assistant row's write at the gate `GATE` until the test releases it."""

    def __init__(self, engine: Engine, gates: Gates) -> None:
        super().__init__(engine)
        self.gates = gates

    async def append(
        self,
        conversation_id: str | None,
        turn_id: str,
        role: Role,
        content: str,
        status: MessageStatus = "complete",
        *,
        replaces: str | None = None,
        usage: TurnUsage | None = None,
        release: SlotRelease | None = None,
        sources: str | None = None,
    ) -> bool:
        if role == "assistant":
            await self.gates.wait(GATE)
        return await super().append(
            conversation_id,
            turn_id,
            role,
            content,
            status,
            replaces=replaces,
            usage=usage,
            release=release,
            sources=sources,
        )
