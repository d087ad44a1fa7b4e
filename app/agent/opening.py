"""The start of a turn: read the flag and memory fail-open, store the user's message, all by one
deadline, and build the turn's context."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import structlog

from app.agent.context import TurnContext
from app.agent.request import TurnRequest, TurnServices
from app.concurrency import CancelFlag
from app.db.deadline import DeadlineExceededError, within
from app.memory.ledger import MemoryLedger
from app.memory.render import MemoryStatus
from app.memory.rules import Snapshot
from app.telemetry import memory_read_failed

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class _Memory:
    status: MemoryStatus
    snapshot: Snapshot
    ledger: MemoryLedger | None


_DISABLED = _Memory("disabled", Snapshot(), None)

# The message write starts when the memory read has ended, or this long after it started if it
# has not. Started together, the two ran their Python side by side in two worker threads, which
# only took turns holding the GIL, each turn a hand-over between threads: both took about twice
# as long as one after the other (docs/performance.md, round 8). The bound keeps them
# independent: a memory read that hangs holds the user's message back by this much, not by its
# deadline.
STORE_AFTER_SECONDS = 0.02


async def open_turn(
    request: TurnRequest,
    services: TurnServices,
    *,
    turn_id: str,
    uses_memory: bool,
    cancel_event: CancelFlag,
) -> TurnContext:
    """The flag and memory reads, then the user message's write (at the latest
    STORE_AFTER_SECONDS after the reads began: they are the time to first text), all by one
    deadline, MEMORY_READ_TIMEOUT_SECONDS, so `start` never waits on a database that hangs."""
    flags = services.flags
    opened_at = flags.now() if flags is not None else None
    deadline = asyncio.get_running_loop().time() + services.settings.memory_read_timeout_seconds
    reading = asyncio.ensure_future(_load_memory(request, services, turn_id, uses_memory, deadline))
    try:
        await asyncio.wait({reading}, timeout=STORE_AFTER_SECONDS)
    except asyncio.CancelledError:
        reading.cancel()
        raise
    memory, conversation_id = await asyncio.gather(
        reading, _store_message(request, services, turn_id, deadline)
    )
    log.info(
        "turn.started",
        turn_id=turn_id,
        conversation_id=conversation_id,
        memory_status=memory.status,
        history_messages=len(request.history),
    )
    return TurnContext(
        turn_id=turn_id,
        conversation_id=conversation_id,
        user_id=request.user_id,
        memory_status=memory.status,
        ledger=memory.ledger,
        baseline=memory.snapshot,
        cancel_event=cancel_event,
        opened_at=opened_at,
        search=services.search if request.user_id is not None else None,
        search_timeout_seconds=services.settings.search_timeout_seconds,
    )


async def _load_memory(
    request: TurnRequest, services: TurnServices, turn_id: str, uses_memory: bool, deadline: float
) -> _Memory:
    """Fail open for the answer, closed for writes: after a read error there is no ledger, not
    even an empty one. A flag that cannot be read counts as a read error (memory is off for the
    turn, never the MEMORY_ENABLED default)."""
    flags, memory, user_id = services.flags, services.memory, request.user_id
    if user_id is None or not uses_memory or flags is None or memory is None:
        return _DISABLED
    flag = await flags.memory_status(seconds=remaining(deadline))
    if flag == "unavailable":
        memory_read_failed(turn_id=turn_id, error_type="FlagUnavailable", source="flag")
        return _Memory("unavailable", Snapshot(), None)
    try:
        snapshot = await memory.read_async(user_id, seconds=remaining(deadline))
    except Exception as error:
        memory_read_failed(turn_id=turn_id, error_type=type(error).__name__, source="memory")
        return _Memory("unavailable" if flag == "enabled" else "disabled", Snapshot(), None)
    if flag == "disabled":
        # Read only for the counts the memory event reports: never shown to the model.
        return _Memory("disabled", snapshot, None)
    return _Memory("available", snapshot, MemoryLedger(snapshot))


async def _store_message(
    request: TurnRequest, services: TurnServices, turn_id: str, deadline: float
) -> str | None:
    """Store the user's message (best-effort, by `deadline`): in a new conversation on the first
    turn, else appended to the caller's conversation. Returns the conversation's id, None when a
    new one could not be stored in time (abandoned: it can never commit)."""
    conversations, user_id = services.conversations, request.user_id
    existing = request.conversation_id
    if user_id is None or not request.store_transcript or conversations is None:
        return existing
    message, seconds = request.message, remaining(deadline)
    try:
        if existing is None:
            return await within(
                seconds,
                lambda: conversations.create(user_id, turn_id, message),
                what="conversation create",
            )
        await within(
            seconds,
            lambda: conversations.append(existing, turn_id, "user", message),
            what="transcript append",
        )
    except DeadlineExceededError:
        log.warning("conversation.store_timed_out", turn_id=turn_id)
    return existing


def remaining(deadline: float) -> float:
    """Seconds left until `deadline` on the running loop's clock (never negative)."""
    return max(0.0, deadline - asyncio.get_running_loop().time())
