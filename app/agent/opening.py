"""The start of a turn, one phase with one owner for every route: the admission under the
caller's limits with the user message's write in its transaction and the memory read on its
connection (`admit`, before the response: a refusal is a plain 429), then in the stream the flag
read, whatever of the two the admission's transaction could not do (it failed), all by one
deadline, and the turn's context (`open_turn`). Memory reads fail open."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace

import structlog
from sqlalchemy import Connection

from app.agent.context import TurnContext
from app.agent.events import TranscriptStatus
from app.agent.failures import TurnFailure
from app.agent.request import MemoryRead, MessageWrite, TurnRequest, TurnServices
from app.concurrency import CancelFlag
from app.conversations.service import new_conversation_id
from app.db import erasure_audit as audit
from app.db.admission import DatabaseBusyError, admitted
from app.db.deadline import DeadlineExceededError, within
from app.memory.ledger import MemoryLedger
from app.memory.projects import Scope
from app.memory.provenance import SaveMode
from app.memory.render import MemoryStatus
from app.memory.rules import Snapshot
from app.memory.service import MemoryUnavailableError
from app.operators.limits import Caller, Limits, LimitStore
from app.telemetry import memory_read_failed

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class _Memory:
    status: MemoryStatus
    snapshot: Snapshot
    ledger: MemoryLedger | None
    read: bool = True  # False: `snapshot` is empty because memory could not be read
    save_mode: SaveMode | None = None


_DISABLED = _Memory("disabled", Snapshot(), None)
BUSY_MESSAGE = "The service is too busy to start this turn; retry shortly."

# The message write starts when the memory read has ended, or this long after it started if it
# has not. Started together, the two ran their Python side by side in two worker threads, which
# only took turns holding the GIL, each turn a hand-over between threads: both took longer
# than one after the other (docs/performance.md). The bound keeps them
# independent: a memory read that hangs holds the user's message back by this much, not by its
# deadline.
STORE_AFTER_SECONDS = 0.02


@dataclass(frozen=True)
class Gate:
    """Who a turn is admitted as and under which limits, and the store that counts them."""

    store: LimitStore
    caller: Caller
    limits: Limits


async def admit(
    request: TurnRequest,
    services: TurnServices,
    gate: Gate,
    *,
    turn_id: str,
    uses_memory: bool,
) -> TurnRequest:
    """Admit the turn (RateLimited when refused, with nothing read or written) with the user
    message stored in the admission's transaction, then the caller's memory read on its
    connection once it committed; returns the request carrying the admission, the write as
    tried (`MessageWrite`) and the read (`MemoryRead`, awaited by `open_turn`). A write or read
    the turn does not do is not tried; one that the failed transaction could not do is left
    to `open_turn`."""
    message = _message_write(request, services, turn_id)
    read = _memory_read(request, services, uses_memory)
    write = message[1] if message is not None else None
    admission, stored, memory = await gate.store.admit_with(gate.caller, gate.limits, write, read)
    written = MessageWrite(message[0], committed=stored is not None) if message else None
    return replace(request, admission=admission, written=written, memory_read=memory)


def _message_write(
    request: TurnRequest, services: TurnServices, turn_id: str
) -> tuple[str, Callable[[Connection], str]] | None:
    """The user message's write as work for the admission's transaction, and the conversation
    it goes into (the existing one, or the id a new one takes); None: nothing to store."""
    conversations, user_id = services.conversations, request.user_id
    if user_id is None or not request.store_transcript or conversations is None:
        return None
    conversation_id = request.conversation_id or new_conversation_id()
    return conversation_id, conversations.user_message(
        user_id,
        turn_id,
        request.message,
        conversation_id=conversation_id,
        new=request.conversation_id is None,
        project_id=request.project_id,
        replaces=request.replaces,
        temporary=request.temporary,
    )


def _memory_read(
    request: TurnRequest, services: TurnServices, uses_memory: bool
) -> Callable[[Connection], tuple[Snapshot, SaveMode]] | None:
    """The memory read after the admission, in the scope `_load_memory` reads (fixed by the
    request, never the model); None when the turn reads no memory."""
    memory, user_id = services.memory, request.user_id
    if user_id is None or not uses_memory or memory is None or request.temporary:
        return None
    return memory.read_with_save_mode_on(user_id, Scope(request.project_id, owner=False))


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
    deadline, MEMORY_READ_TIMEOUT_SECONDS, so `start` never waits on a database that hangs.

    The deadline starts once the turn holds its worker slots: waiting for them is a busy
    database, bounded by DB_QUEUE_TIMEOUT_SECONDS and DB_QUEUE_LIMIT, past which the turn
    fails with `database_busy` before anything is answered (a turn that cannot be stored is
    never answered silently)."""
    # A worker slot (app/db/admission.py) for each of the memory read (after the flag read) and
    # the message's write that it still has to do: the admission has usually done both.
    slots = (request.memory_read is None) + (request.stored_in is None)
    try:
        async with admitted(slots) if slots else contextlib.nullcontext():
            return await _open(request, services, turn_id, uses_memory, cancel_event)
    except DatabaseBusyError:
        log.warning("turn.database_busy", turn_id=turn_id)
        raise TurnFailure("database_busy", BUSY_MESSAGE) from None
    finally:
        if request.memory_read is not None:
            request.memory_read.abandon()  # read and used by now, or not wanted


async def _open(
    request: TurnRequest,
    services: TurnServices,
    turn_id: str,
    uses_memory: bool,
    cancel_event: CancelFlag,
) -> TurnContext:
    flags = services.flags
    opened_at = flags.now() if flags is not None else None
    begun_at = audit.now()
    deadline = asyncio.get_running_loop().time() + services.settings.memory_read_timeout_seconds
    conversation_id: str | None = request.stored_in  # stored with the admission (`admit`)
    transcript: TranscriptStatus
    if conversation_id is not None:
        memory = await _load_memory(request, services, turn_id, uses_memory, deadline)
        transcript = "stored"
    else:
        memory, (conversation_id, transcript) = await _read_and_store(
            request, services, turn_id, uses_memory, deadline
        )
    log.info(
        "turn.started",
        turn_id=turn_id,
        conversation_id=conversation_id,
        memory_status=memory.status,
        transcript_status=transcript,
        history_messages=len(request.history),
    )
    return TurnContext(
        turn_id=turn_id,
        conversation_id=conversation_id,
        user_id=request.user_id,
        memory_status=memory.status,
        ledger=memory.ledger,
        baseline=memory.snapshot,
        baseline_read=memory.read,
        transcript_status=transcript,
        save_mode=memory.save_mode,
        cancel_event=cancel_event,
        opened_at=opened_at,
        begun_at=begun_at,
        search=services.search if request.user_id is not None and not request.temporary else None,
        search_timeout_seconds=services.settings.search_timeout_seconds,
        project_id=request.project_id,
        project_name=request.project_name,
    )


async def _read_and_store(
    request: TurnRequest, services: TurnServices, turn_id: str, uses_memory: bool, deadline: float
) -> tuple[_Memory, tuple[str | None, TranscriptStatus]]:
    reading = asyncio.ensure_future(_load_memory(request, services, turn_id, uses_memory, deadline))
    try:
        await asyncio.wait({reading}, timeout=STORE_AFTER_SECONDS)
    except asyncio.CancelledError:
        reading.cancel()
        raise
    return await asyncio.gather(reading, _store_message(request, services, turn_id, deadline))


async def _load_memory(
    request: TurnRequest, services: TurnServices, turn_id: str, uses_memory: bool, deadline: float
) -> _Memory:
    """Fail open for the answer, closed for writes: after a read error there is no ledger, not
    even an empty one. A flag that cannot be read counts as a read error (memory is off for the
    turn, never the MEMORY_ENABLED default)."""
    flags, memory, user_id = services.flags, services.memory, request.user_id
    if user_id is None or not uses_memory or flags is None or memory is None:
        return _DISABLED
    if request.temporary:  # nothing of memory is read, not even for the counts
        return _DISABLED
    flag = await flags.memory_status(seconds=remaining(deadline))
    if flag == "unavailable":
        memory_read_failed(turn_id=turn_id, error_type="FlagUnavailable", source="flag")
        return _Memory("unavailable", Snapshot(), None, read=False)
    mode: SaveMode | None = None
    try:
        # In a project: the model's scope (user profile, the project's document, the general
        # document only when the project is opted into it), fixed by the request, never by
        # anything the model says.
        scope = Scope(request.project_id, owner=False)
        if request.memory_read is not None:  # read after the admission, in the same scope
            snapshot, mode = await _read_after_admission(request.memory_read, remaining(deadline))
        elif flag == "enabled" and services.control is not None:
            # The save mode words the turn (its edits saved, or held for approval); it is read
            # with the memory. The commit point reads it again under the writer lock: this
            # read only words the turn.
            snapshot, mode = await memory.read_with_save_mode_async(
                user_id, seconds=remaining(deadline), scope=scope
            )
        else:
            snapshot = await memory.read_async(user_id, seconds=remaining(deadline), scope=scope)
    except Exception as error:
        memory_read_failed(turn_id=turn_id, error_type=type(error).__name__, source="memory")
        status: MemoryStatus = "unavailable" if flag == "enabled" else "disabled"
        return _Memory(status, Snapshot(), None, read=False)
    if flag != "enabled":
        # Read only for the counts the memory event reports: never shown to the model.
        return _Memory("disabled", snapshot, None)
    return _Memory("available", snapshot, MemoryLedger(snapshot), save_mode=mode)


async def _read_after_admission(read: MemoryRead, seconds: float) -> tuple[Snapshot, SaveMode]:
    """The read `admit` started (`TurnRequest.memory_read`) by the turn's deadline, failing as
    the opening's own read fails (`MemoryService.read_with_save_mode_async`)."""
    try:
        return await read.result(seconds)
    except DeadlineExceededError as error:
        raise MemoryUnavailableError("DeadlineExceededError") from error


async def _store_message(
    request: TurnRequest, services: TurnServices, turn_id: str, deadline: float
) -> tuple[str | None, TranscriptStatus]:
    """Store the user's message (best-effort, by `deadline`): in a new conversation on the first
    turn, else appended to the caller's conversation. Returns the conversation's id (None when a
    new one could not be stored in time: abandoned, it can never commit) and whether the
    message was stored, which `start` tells the client."""
    conversations, user_id = services.conversations, request.user_id
    existing = request.conversation_id
    if user_id is None or not request.store_transcript or conversations is None:
        return existing, "disabled"
    message, seconds = request.message, remaining(deadline)
    # The try with the admission failed (`MessageWrite`): it may have committed anyway.
    tried = request.written
    try:
        if existing is None:
            created = await within(
                seconds,
                lambda: conversations.create(
                    user_id,
                    turn_id,
                    message,
                    request.project_id,
                    conversation_id=tried.conversation_id if tried else None,
                    retried=tried is not None,
                    temporary=request.temporary,
                ),
                what="conversation create",
            )
            return created, "stored" if created is not None else "unavailable"
        stored = await within(
            seconds,
            lambda: conversations.append(
                existing, turn_id, "user", message, replaces=request.replaces, retried=bool(tried)
            ),
            what="transcript append",
        )
    except DeadlineExceededError:
        log.warning("conversation.store_timed_out", turn_id=turn_id)
        return (existing, "unavailable")
    return existing, "stored" if stored else "unavailable"


def remaining(deadline: float) -> float:
    """Seconds left until `deadline` on the running loop's clock (never negative)."""
    return max(0.0, deadline - asyncio.get_running_loop().time())
