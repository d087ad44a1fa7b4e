"""Appending a turn's message (one statement on PostgreSQL, separate statements elsewhere) stores
the same rows on every dialect: the message, the conversation's `updated_at` moved to it, and
the turn's usage added to the day's row (created by the first answer, added to by the next)."""

from __future__ import annotations

import asyncio

from sqlalchemy import Engine, select

from app.conversations.service import ConversationService
from app.db.schema import conversation_messages, conversations
from app.operators import usage
from app.operators.usage import TurnUsage

TURN_1 = "00000000-0000-4000-8000-000000000001"
TURN_2 = "00000000-0000-4000-8000-000000000002"


def test_an_answer_stores_its_message_touches_its_conversation_and_adds_its_usage(
    engine: Engine,
) -> None:
    """Invariant: after two answered turns the conversation holds four messages in order, its
    `updated_at` is its last message's time, and the day's usage counts both turns' tokens."""
    service = ConversationService(engine)

    async def two_turns() -> str | None:
        conversation = await service.create("alice", TURN_1, "hello")
        assert conversation is not None
        stored = [
            await service.append(
                conversation, TURN_1, "assistant", "hi", usage=TurnUsage("alice", 10, 3)
            ),
            await service.append(conversation, TURN_2, "user", "again"),
            await service.append(
                conversation, TURN_2, "assistant", "yes", usage=TurnUsage("alice", 7, 2)
            ),
        ]
        assert stored == [True, True, True]
        return conversation

    conversation_id = asyncio.run(two_turns())
    with engine.connect() as connection:
        rows = connection.execute(
            select(
                conversation_messages.c.turn_id,
                conversation_messages.c.role,
                conversation_messages.c.content,
                conversation_messages.c.created_at,
            )
            .where(conversation_messages.c.conversation_id == conversation_id)
            .order_by(conversation_messages.c.id)
        ).all()
        updated_at = connection.execute(
            select(conversations.c.updated_at).where(conversations.c.id == conversation_id)
        ).scalar_one()
        spent = usage.for_subject(connection, "alice")
    assert [(row.turn_id, row.role, row.content) for row in rows] == [
        (TURN_1, "user", "hello"),
        (TURN_1, "assistant", "hi"),
        (TURN_2, "user", "again"),
        (TURN_2, "assistant", "yes"),
    ]
    assert updated_at == rows[-1].created_at
    totals = (
        sum(row.turns for row in spent),
        sum(row.prompt_tokens for row in spent),
        sum(row.completion_tokens for row in spent),
    )
    assert totals == (2, 17, 5)  # one row, or two when the turns straddle midnight UTC
