"""The start of a turn: the memory read first, then the user message's write, yet independent. A
quick read is over before the write begins (their Python does not share the GIL side by side);
a read that does not end never holds the message back until its deadline."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from app.agent.opening import open_turn
from app.agent.request import TurnRequest, TurnServices
from app.concurrency import CancelFlag
from app.memory.rules import Snapshot
from app.settings import Settings


class Flags:
    def now(self) -> float:
        return 0.0

    async def memory_status(self, *, seconds: float | None = None) -> str:
        return "enabled"


class Memory:
    """A memory read that records when it runs; it may wait for `until` before answering."""

    def __init__(self, log: list[str], until: asyncio.Event | None = None) -> None:
        self.log = log
        self.until = until

    async def read_async(
        self, user_id: str, *, seconds: float | None = None, scope: object = None
    ) -> Snapshot:
        self.log.append("read starts")
        if self.until is not None:
            await asyncio.wait_for(self.until.wait(), seconds)
        self.log.append("read ends")
        return Snapshot()


class Conversations:
    """A message write that records when it runs and may release the memory read."""

    def __init__(self, log: list[str], releases: asyncio.Event | None = None) -> None:
        self.log = log
        self.releases = releases

    async def create(
        self,
        user_id: str,
        turn_id: str,
        first_message: str,
        project_id: str | None = None,
        *,
        conversation_id: str | None = None,
        retried: bool = False,
        # The temporary-chats merge passes whether the new conversation is temporary.
        temporary: bool = False,
    ) -> str:
        self.log.append("write starts")
        await asyncio.sleep(0)
        if self.releases is not None:
            self.releases.set()
        self.log.append("write ends")
        return "conversation-1"


def start(memory: Memory, conversations: Conversations) -> Any:
    settings = Settings(_env_file=None, memory_read_timeout_seconds=5)  # type: ignore[call-arg]
    services = TurnServices(
        settings=settings,
        memory=cast(Any, memory),
        flags=cast(Any, Flags()),
        conversations=cast(Any, conversations),
    )
    request = TurnRequest(message="hello", user_id="alice")

    async def run() -> Any:
        return await open_turn(
            request, services, turn_id="t1", uses_memory=True, cancel_event=CancelFlag()
        )

    return asyncio.run(run())


def test_a_quick_memory_read_ends_before_the_message_write_begins() -> None:
    log: list[str] = []
    context = start(Memory(log), Conversations(log))
    assert log == ["read starts", "read ends", "write starts", "write ends"]
    assert (context.memory_status, context.conversation_id) == ("available", "conversation-1")


def test_a_memory_read_that_does_not_end_does_not_hold_the_message_back() -> None:
    """The read waits for the write (within its five-second deadline): had the write waited
    for the read to end, the read would have run out of time and memory would be unavailable."""
    log: list[str] = []
    released = asyncio.Event()
    context = start(Memory(log, until=released), Conversations(log, releases=released))
    assert log == ["read starts", "write starts", "write ends", "read ends"]
    assert (context.memory_status, context.conversation_id) == ("available", "conversation-1")
