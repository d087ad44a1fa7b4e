"""One chat turn, orchestrated: open the memory scope, read memory fail-open, run model rounds,
stage tool calls on the ledger, commit after the final output, and end with `done` or `error`.

Decisions live in `steps.py`, tool behaviour in `tools.py`, model access in `llm.py`; this module
only sequences them and owns the failure paths (the design's "One turn", steps 1-6).

Fallback model (LLM_FALLBACK_MODEL, a model name on the same endpoint): when a model round fails
(the request is refused or errors, or the stream breaks or ends without a finish reason), the
fallback model re-runs that same round, with the same messages, and answers the rest of the turn,
only if all of these hold: a fallback is configured and is not already the one answering, no
memory operation has been staged in this turn, and no answer text has been streamed to the client
yet. Otherwise the turn ends with `error` and nothing is committed. A timeout or a disconnect never
triggers the fallback.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, assert_never

import anyio
import structlog
from opentelemetry import trace

from app.agent.agents import Agent
from app.agent.context import TurnContext, new_turn_id
from app.agent.events import (
    CommitOutcome,
    DeltaEvent,
    DoneEvent,
    ErrorEvent,
    FinishReason,
    MemoryEvent,
    StartEvent,
    ToolEvent,
    TurnEvent,
    Usage,
)
from app.agent.llm import (
    DEFAULT_SAMPLING,
    Message,
    ModelFailure,
    RoundResult,
    Sampling,
    ToolCallRequest,
)
from app.agent.prompts import MemoryView
from app.agent.steps import FinalOutput, RunTools, ToolLimit, next_step
from app.agent.tools import MEMORY_TOOL_NAME, run_memory_tool, unknown_tool_result
from app.concurrency import CLEANUP_SECONDS, finish_even_if_cancelled
from app.conversations.repository import MessageStatus, Role
from app.conversations.service import ConversationService
from app.db.deadline import DeadlineExceededError, within
from app.memory.flags import FlagStatus, FlagStore
from app.memory.ledger import MemoryLedger
from app.memory.render import MemoryStatus
from app.memory.rules import MemoryValidationError, Snapshot
from app.memory.scope import memory_scope
from app.memory.service import CommitResult, MemoryService
from app.settings import Settings
from app.telemetry import capture_content, count_targets, memory_event, turn_context

log = structlog.get_logger(__name__)
tracer = trace.get_tracer(__name__)

Emit = Callable[[TurnEvent], None]
HistoryRole = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class HistoryMessage:
    """An earlier message. `system` ones come from a client that sends its own instructions:
    they follow the compiled system prompt, never replace it."""

    role: HistoryRole
    content: str


@dataclass(frozen=True)
class TurnRequest:
    """A validated request. `user_id` is the verified subject; None on the memory-free route.
    `conversation_id` is an existing conversation the caller owns, or None to start one.
    `history` precedes `message`, in order; `sampling` holds the client's generation options."""

    message: str
    user_id: str | None
    conversation_id: str | None = None
    history: tuple[HistoryMessage, ...] = ()
    store_transcript: bool = True
    sampling: Sampling = DEFAULT_SAMPLING


@dataclass(frozen=True)
class TurnServices:
    settings: Settings
    memory: MemoryService | None = None
    flags: FlagStore | None = None
    conversations: ConversationService | None = None


@dataclass
class _Progress:
    """What the user has seen so far (for the transcript) and which model answers."""

    model: str
    text: list[str] = field(default_factory=list)
    rounds: int = 0
    usage: Usage | None = field(default_factory=lambda: Usage(0, 0))

    @property
    def answer(self) -> str:
        return "".join(self.text)

    def count(self, usage: Usage | None) -> None:
        """Add a round's tokens; one round that did not report them makes the total unknown."""
        self.usage = None if usage is None or self.usage is None else self.usage + usage


class TurnFailure(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Turn:
    """One turn. Build it, then `await run(emit)` (or iterate `stream_turn`)."""

    def __init__(self, agent: Agent, request: TurnRequest, services: TurnServices) -> None:
        self.agent = agent
        self.request = request
        self.services = services
        self.turn_id = new_turn_id()
        self.cancel_event = threading.Event()
        self.context: TurnContext | None = None
        self.settled: _Settled | None = None  # set at the commit point
        self.opened_at: float | None = None  # on the flag store's clock
        self._transcript: asyncio.Future[None] | None = None

    # -- the whole turn ------------------------------------------------------------------------

    async def run(self, emit: Emit) -> None:
        started = time.perf_counter()
        progress = _Progress(model=self.agent.model.primary)
        outcome = "failed"
        with (
            tracer.start_as_current_span("chat.turn") as span,
            turn_context(self.turn_id, self.request.user_id),  # ids on every log line
        ):
            span.set_attribute("turn.agent", self.agent.name)
            capture_content(span, "app.capture.user_message", self.request.message)
            try:
                failure = await self._attempt(progress, emit, span)
                outcome = await self._end(failure, progress, emit)
            except asyncio.CancelledError:
                # The client left or the task was cancelled. A turn past its commit point
                # succeeded: it keeps its one `complete` row. Otherwise the ledger is dropped,
                # nothing is committed, and the row says `interrupted`.
                self.cancel_event.set()
                settled = self.settled
                outcome = settled.finish if settled else "cancelled"
                if settled is None:
                    self._discard()
                await self._end_transcript(
                    progress.answer, "complete" if settled else "interrupted"
                )
                raise
            finally:
                capture_content(span, "app.capture.model_output", progress.answer)
                span.set_attribute("turn.outcome", outcome)
                span.set_attribute("turn.rounds", progress.rounds)
                log.info(
                    "turn.finished",
                    turn_id=self.turn_id,
                    agent=self.agent.name,
                    outcome=outcome,
                    rounds=progress.rounds,
                    duration_ms=round((time.perf_counter() - started) * 1000, 1),
                )

    async def _attempt(
        self, progress: _Progress, emit: Emit, span: trace.Span
    ) -> ErrorEvent | None:
        """Play the turn under its deadline; a failure becomes the error event that ends it."""
        try:
            async with asyncio.timeout(self.services.settings.turn_timeout_seconds):
                await self._play(progress, emit, span)
        except TimeoutError:
            self.cancel_event.set()
            return ErrorEvent("timeout", "The turn took too long; nothing was saved to memory.")
        except (ModelFailure, TurnFailure) as error:
            return ErrorEvent(error.code, error.message + " Nothing was saved to memory.")
        except Exception as error:
            log.exception("turn.failed", turn_id=self.turn_id, error_type=type(error).__name__)
            return ErrorEvent("internal_error", "The turn failed; nothing was saved to memory.")
        return None

    async def _end(self, failure: ErrorEvent | None, progress: _Progress, emit: Emit) -> str:
        """Write the turn's one assistant row and send its last event; returns the outcome."""
        settled = self.settled
        if settled is None:
            assert failure is not None  # a turn that did not fail always reaches its commit point
            self._discard()
            emit(failure)
            await self._end_transcript(progress.answer, "failed")
            return failure.code
        # Settled, possibly in a race with the deadline: the commit's answer stands.
        if not settled.reported:
            settled.reported = True
            emit(settled.event)
        await self._end_transcript(progress.answer, "complete")
        emit(DoneEvent(settled.finish, progress.usage))
        return settled.finish

    async def _play(self, progress: _Progress, emit: Emit, span: trace.Span) -> None:
        """Start, model rounds, then the commit point; the memory event follows the commit at
        once, before anything else can happen to the turn."""
        ctx = await self._open()
        span.set_attribute("memory.status", ctx.memory_status)
        with self._scope(ctx):
            emit(StartEvent(ctx.conversation_id, ctx.turn_id, ctx.memory_status))
            finish = await self._rounds(ctx, progress, emit)
            settled = await self._settle(ctx, finish)
        settled.reported = True
        emit(settled.event)

    # -- steps 1-2: scope and memory, fail-open ------------------------------------------------

    async def _open(self) -> TurnContext:
        user_id = self.request.user_id
        if self.services.flags is not None:
            self.opened_at = self.services.flags.now()
        # Independent reads and writes, run side by side: they are the time to first text. Both
        # end by one deadline (MEMORY_READ_TIMEOUT_SECONDS), so `start` never waits on a database
        # that hangs.
        deadline = asyncio.get_running_loop().time() + (
            self.services.settings.memory_read_timeout_seconds
        )
        (status, snapshot, ledger), conversation_id = await asyncio.gather(
            self._load_memory(user_id, deadline), self._conversation(user_id, deadline)
        )
        self.context = TurnContext(
            turn_id=self.turn_id,
            conversation_id=conversation_id,
            user_id=user_id,
            memory_status=status,
            ledger=ledger,
            writes_enabled=ledger is not None,
            baseline=snapshot,
            cancel_event=self.cancel_event,
        )
        log.info("turn.started", turn_id=self.turn_id, conversation_id=conversation_id,
                 agent=self.agent.name, memory_status=status,
                 history_messages=len(self.request.history))
        return self.context

    async def _load_memory(
        self, user_id: str | None, deadline: float
    ) -> tuple[MemoryStatus, Snapshot, MemoryLedger | None]:
        """Fail open for the answer, closed for writes: after a read error there is no ledger,
        not even an empty one. A flag that cannot be read counts as a read error (memory is off
        for the turn, never the MEMORY_ENABLED default)."""
        flags, memory = self.services.flags, self.services.memory
        if user_id is None or not self.agent.uses_memory or flags is None or memory is None:
            return "disabled", Snapshot(), None
        flag = await flags.memory_status(seconds=_remaining(deadline))
        if flag == "unavailable":
            log.warning("memory.read_failed", turn_id=self.turn_id, error_type="FlagUnavailable")
            return "unavailable", Snapshot(), None
        try:
            snapshot = await memory.read_async(user_id, seconds=_remaining(deadline))
        except Exception as error:
            log.warning("memory.read_failed", turn_id=self.turn_id,
                        error_type=type(error).__name__)
            return ("unavailable" if flag == "enabled" else "disabled"), Snapshot(), None
        if flag == "disabled":
            # Read only for the counts the memory event reports: never shown to the model.
            return "disabled", snapshot, None
        return "available", snapshot, MemoryLedger(snapshot)

    async def _conversation(self, user_id: str | None, deadline: float) -> str | None:
        """Store the user's message (best-effort, by `deadline`): in a new conversation on the
        first turn, else appended to the caller's conversation. Returns the conversation's id,
        None when a new one could not be stored in time (abandoned: it can never commit)."""
        conversations = self.services.conversations
        existing = self.request.conversation_id
        if user_id is None or not self.request.store_transcript or conversations is None:
            return existing
        message, seconds = self.request.message, _remaining(deadline)
        try:
            if existing is None:
                return await within(
                    seconds, lambda: conversations.create(user_id, self.turn_id, message),
                    what="conversation create",
                )
            await within(
                seconds, lambda: conversations.append(existing, self.turn_id, "user", message),
                what="transcript append",
            )
        except DeadlineExceededError:
            log.warning("conversation.store_timed_out", turn_id=self.turn_id)
        return existing

    @contextlib.contextmanager
    def _scope(self, ctx: TurnContext) -> Iterator[None]:
        if ctx.user_id is None:
            yield
            return
        with memory_scope(ctx.user_id, ctx.writes_enabled):
            yield

    def _discard(self) -> None:
        if self.context is not None:
            self.context.ledger = None

    # -- steps 3-4: the prompt and the tool loop -----------------------------------------------

    def _initial_messages(self, agent: Agent) -> list[Message]:
        messages: list[Message] = [{"role": "system", "content": agent.instructions}]
        messages.extend(
            {"role": item.role, "content": item.content} for item in self.request.history
        )
        messages.append({"role": "user", "content": self.request.message})
        return messages

    async def _rounds(self, ctx: TurnContext, progress: _Progress, emit: Emit) -> FinishReason:
        memory = None
        if ctx.user_id is not None and self.agent.uses_memory:
            memory = MemoryView(ctx.memory_status, ctx.baseline, ctx.memory_tool_offered)
        agent = self.agent.for_turn(memory)  # request-local copy; the shared agent is untouched
        messages = self._initial_messages(agent)
        max_rounds = self.services.settings.llm_max_rounds
        for round_number in range(1, max_rounds + 1):
            progress.rounds = round_number
            result = await self._model_round(ctx, agent, messages, progress, emit)
            step = next_step(result, round_number, max_rounds)
            match step:
                case FinalOutput(finish_reason=reason):
                    return reason
                case ToolLimit():
                    return "tool_limit"
                case RunTools(text=text, calls=calls):
                    messages.append(_assistant_message(text, calls))
                    for call in calls:
                        content = self._run_tool(ctx, agent, call, emit)
                        messages.append(
                            {"role": "tool", "tool_call_id": call.id, "content": content}
                        )
                case _:
                    assert_never(step)
        return "tool_limit"  # unreachable: the last round is classified as ToolLimit

    async def _model_round(
        self,
        ctx: TurnContext,
        agent: Agent,
        messages: Sequence[Message],
        progress: _Progress,
        emit: Emit,
    ) -> RoundResult:
        def on_text(piece: str) -> None:
            progress.text.append(piece)
            emit(DeltaEvent(piece))

        while True:
            try:
                result = await agent.model.run_round(
                    progress.model, messages, agent.tools, on_text, self.request.sampling
                )
            except ModelFailure as failure:
                fallback = agent.model.fallback
                # The fallback may answer only a turn that has neither staged memory nor shown
                # any text: otherwise its answer could contradict what was staged or said.
                if (
                    fallback is None
                    or progress.model == fallback
                    or ctx.staged
                    or progress.text
                    or failure.streamed
                ):
                    raise
                log.warning("llm.fallback", turn_id=ctx.turn_id, failure=failure.code,
                            model=fallback)
                progress.model = fallback
                continue
            progress.count(result.usage)
            return result

    def _run_tool(
        self, ctx: TurnContext, agent: Agent, call: ToolCallRequest, emit: Emit
    ) -> str:
        offered = {str(tool["function"]["name"]) for tool in agent.tools}
        if call.name not in offered:
            if call.name == MEMORY_TOOL_NAME:
                emit(ToolEvent("rejected", 0))
            return unknown_tool_result(call.name == MEMORY_TOOL_NAME)
        result = run_memory_tool(ctx, call.arguments)
        emit(ToolEvent(result.outcome, result.operation_count))
        return result.content

    # -- step 5: commit while connected --------------------------------------------------------

    async def _settle(self, ctx: TurnContext, finish: FinishReason) -> _Settled:
        """The commit point. Only a final answer commits; a turn that ended at the tool limit or
        was cut by the token limit discards what it staged (`failed`, with that reason)."""
        ledger = ctx.ledger
        if ledger is None or not ledger.staged:
            return self._seal(finish, _memory_event("none", ctx.baseline))
        if finish != "stop":
            ctx.ledger = None
            report_commit(ledger, "failed", ctx.baseline, reason=finish)
            return self._seal(finish, _memory_event("failed", ctx.baseline, reason=finish))
        flag = await self._flag_at_commit()
        if flag != "enabled":
            # An operator switched memory off during the turn (or the flag cannot be read):
            # what the turn staged is discarded, never committed behind the switch.
            ctx.ledger = None
            if flag == "disabled":
                report_commit(ledger, "none", ctx.baseline, reason="memory_disabled")
                return self._seal(finish, _memory_event("none", ctx.baseline))
            report_commit(ledger, "failed", ctx.baseline, reason="memory_unavailable")
            return self._seal(
                finish, _memory_event("failed", ctx.baseline, reason="memory_unavailable")
            )
        return await self._commit(ctx, ledger, finish)

    async def _flag_at_commit(self) -> FlagStatus:
        """The flag read again at the commit point, from no cache older than this turn."""
        flags = self.services.flags
        if flags is None:
            return "unavailable"
        return await flags.memory_status(
            seconds=self.services.settings.flag_read_timeout_seconds, read_since=self.opened_at
        )

    def _seal(self, finish: FinishReason, event: MemoryEvent) -> _Settled:
        self.settled = _Settled(finish, event)
        return self.settled

    async def _commit(
        self, ctx: TurnContext, ledger: MemoryLedger, finish: FinishReason
    ) -> _Settled:
        memory = self.services.memory
        assert memory is not None and ctx.user_id is not None  # a ledger exists only then
        started = time.perf_counter()
        # report_commit() puts the memory event on this span too (memory.* attributes).
        with tracer.start_as_current_span("memory.commit"):
            task = asyncio.ensure_future(
                memory.commit_in_worker(ctx.user_id, list(ledger.batches), ctx.cancel_event)
            )
            try:
                result = await finish_even_if_cancelled(
                    task, on_cancel=ctx.cancel_event.set, cleanup_seconds=None
                )
            except asyncio.CancelledError:
                if task.done() and not task.cancelled() and task.exception() is None:
                    # The worker passed its last check before the cancellation reached it: the
                    # commit landed, so the turn succeeded whatever happens to the client now.
                    self._committed(ctx, ledger, finish, task.result(), started)
                else:
                    report_commit(ledger, "cancelled", ctx.baseline, started=started)
                raise
            except MemoryValidationError as error:
                # The latest stored memory no longer accepts the batch (a concurrent change,
                # e.g. the entry an edit was made against is gone): refused whole, nothing written.
                ctx.ledger = None
                report_commit(ledger, "failed", ctx.baseline, reason=error.code, started=started)
                return self._seal(finish, _memory_event("failed", ctx.baseline, reason=error.code))
            except Exception as error:
                ctx.ledger = None
                reason = type(error).__name__
                report_commit(ledger, "failed", ctx.baseline, reason=reason, started=started)
                return self._seal(
                    finish, _memory_event("failed", ctx.baseline, reason="memory_unavailable")
                )
            return self._committed(ctx, ledger, finish, result, started)

    def _committed(
        self,
        ctx: TurnContext,
        ledger: MemoryLedger,
        finish: FinishReason,
        result: CommitResult,
        started: float,
    ) -> _Settled:
        ctx.ledger = None  # committed: nothing is left to stage or discard
        outcome: CommitOutcome = "committed" if result.changed else "none"
        report_commit(ledger, outcome, result.snapshot, retry_count=result.retry_count,
                      started=started)
        return self._seal(finish, _memory_event(outcome, result.snapshot))

    # -- transcript ----------------------------------------------------------------------------

    async def _store(
        self, ctx: TurnContext | None, role: Role, content: str, status: MessageStatus
    ) -> None:
        conversations = self.services.conversations
        if ctx is None or conversations is None or not self.request.store_transcript:
            return
        await conversations.append(ctx.conversation_id, ctx.turn_id, role, content, status)

    async def _end_transcript(self, content: str, status: MessageStatus) -> None:
        """The turn's one assistant row. It is written once: a second call (a cancellation
        arriving while the first write runs) waits for the same write."""
        if self._transcript is None:
            self._transcript = asyncio.ensure_future(
                self._store(self.context, "assistant", content, status)
            )
        await finish_even_if_cancelled(self._transcript)


@dataclass
class _Settled:
    """A turn past its commit point: how it finished and the memory event that reports it."""

    finish: FinishReason
    event: MemoryEvent
    reported: bool = False


def _remaining(deadline: float) -> float:
    return max(0.0, deadline - asyncio.get_running_loop().time())


def report_commit(
    ledger: MemoryLedger,
    outcome: str,
    snapshot: Snapshot,
    *,
    retry_count: int = 0,
    reason: str | None = None,
    started: float | None = None,
) -> None:
    """The design's memory event for this commit (log line and span attributes)."""
    memory_event(
        stage="commit", tool=MEMORY_TOOL_NAME, outcome=outcome, reason=reason,
        operation_count=len(ledger.operations), targets=count_targets(ledger.operations),
        user_characters=snapshot.characters("user"),
        memory_characters=snapshot.characters("memory"),
        duration_ms=(time.perf_counter() - started) * 1000 if started is not None else 0.0,
        retry_count=retry_count,
    )


def _memory_event(
    outcome: CommitOutcome, snapshot: Snapshot, *, reason: str | None = None
) -> MemoryEvent:
    return MemoryEvent(
        outcome, snapshot.characters("user"), snapshot.characters("memory"), reason=reason
    )


def _assistant_message(text: str, calls: Sequence[ToolCallRequest]) -> Message:
    return {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in calls
        ],
    }


async def collect_turn(turn: Turn) -> list[TurnEvent]:
    """Run a turn without streaming (cancel the awaiting task to abandon it)."""
    events: list[TurnEvent] = []
    await turn.run(events.append)
    return events


async def stream_turn(turn: Turn) -> AsyncGenerator[TurnEvent, None]:
    """The turn's events as they happen. The turn runs in its own task, so a consumer that goes
    away (sse-starlette cancels the generator on disconnect) cancels it and then waits, shielded,
    for its cleanup: the ledger is discarded and the interrupted transcript stored."""
    queue: asyncio.Queue[TurnEvent | None] = asyncio.Queue()

    async def produce() -> None:
        try:
            await turn.run(queue.put_nowait)
        finally:
            queue.put_nowait(None)

    task = asyncio.create_task(produce(), name=f"turn-{turn.turn_id}")
    try:
        while (event := await queue.get()) is not None:
            yield event
    finally:
        if not task.done():
            turn.cancel_event.set()
            task.cancel()
        # Shielded: this generator is closed by a cancelled consumer, and the turn's own
        # cleanup (rollback, transcript row) must still run to its end.
        with anyio.move_on_after(CLEANUP_SECONDS, shield=True):
            await asyncio.wait([task])
        if task.done() and not task.cancelled():
            task.exception()  # run() reports its own failures as events
