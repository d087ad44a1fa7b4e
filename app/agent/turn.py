"""One chat turn, sequenced: open it (memory read fail-open), run the model rounds, reach the
commit point, then end with `done` or `error` and exactly one assistant row in the transcript.

Each phase lives in its own module: `opening.py` (the start and its deadline), `rounds.py` (model
rounds, tools, fallback), `commit.py` (the commit point and its report), `failures.py` (how a
failure ends the turn), `streaming.py` (the turn as a stream). This module only orders them and
owns the rule that decides the turn's last row: `complete` once the commit point was passed, even
if the client leaves a moment later; otherwise `interrupted` or `failed`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from opentelemetry import trace

from app.agent.agents import Agent
from app.agent.commit import CommitPoint, Settled
from app.agent.context import TurnContext, new_turn_id
from app.agent.events import DoneEvent, ErrorEvent, SourcesEvent, StartEvent, TurnEvent
from app.agent.failures import TurnFailure, failure_event
from app.agent.opening import Gate, admit, open_turn
from app.agent.recall import recall_for_turn
from app.agent.request import TurnRequest, TurnServices
from app.agent.rounds import Progress, run_rounds
from app.concurrency import CancelFlag, finish_even_if_cancelled
from app.conversations.repository import MessageStatus
from app.operators.limits import Admission, SlotRelease
from app.operators.usage import TurnUsage
from app.telemetry import capture_content, start_span, turn_context, turn_finished

tracer = trace.get_tracer(__name__)

Emit = Callable[[TurnEvent], None]

TRANSCRIPT_FAILED = "transcript_unavailable"
TOKEN_EXPIRED = "token_expired"
TOKEN_EXPIRED_MESSAGE = "The token expired during the turn; sign in again and retry."
TRANSCRIPT_FAILED_MESSAGE = (
    "The answer could not be stored in the conversation; try again. Memory is as the memory "
    "event reported."
)


def token_seconds_left(accepted_until: float | None) -> float | None:
    """Seconds until the caller's token stops being accepted (never below zero)."""
    return None if accepted_until is None else max(0.0, accepted_until - time.time())


class Turn:
    """One turn. Start it (`Turn.start`: every route's one way in), then `await run(emit)` (or
    iterate `streaming.stream_turn`)."""

    @classmethod
    async def start(
        cls, agent: Agent, request: TurnRequest, services: TurnServices, gate: Gate
    ) -> Turn:
        """The turn admitted under `gate`'s limits (RateLimited when refused: nothing read or
        written), its user message stored and its memory read begun with the admission
        (app/agent/opening.py); the route then only responds with it."""
        turn_id = new_turn_id()
        admitted = await admit(
            request, services, gate, turn_id=turn_id, uses_memory=agent.uses_memory
        )
        return cls(agent, admitted, services, turn_id=turn_id)

    def __init__(
        self,
        agent: Agent,
        request: TurnRequest,
        services: TurnServices,
        *,
        turn_id: str | None = None,
    ) -> None:
        self.agent = agent
        self.request = request
        self.services = services
        self.turn_id = turn_id or new_turn_id()  # `start`'s, which stored the message with it
        self.cancel_event = CancelFlag()
        self._ran = False
        self.context: TurnContext | None = None
        self.commit_point = CommitPoint(services)
        self._transcript: asyncio.Future[bool] | None = None

    @property
    def settled(self) -> Settled | None:
        return self.commit_point.settled

    @property
    def admission(self) -> Admission:
        """The admission `start` took (its stream slot is freed when the response ends)."""
        admission = self.request.admission
        if admission is None:
            raise RuntimeError("the turn was built without its start (Turn.start)")
        return admission

    @property
    def unplayed(self) -> Callable[[], Awaitable[None]] | None:
        """What ends the turn when its response ended before it ran (its client left first):
        only a turn whose start stored its message or began its memory read has anything to
        end (`end_unplayed`)."""
        if self.request.stored_in is None and self.request.memory_read is None:
            return None
        return self.end_unplayed

    async def run(self, emit: Emit) -> None:
        self._ran = True
        started = time.perf_counter()
        progress = Progress(model=self.agent.model.primary)
        outcome = "failed"
        with (
            start_span(tracer, "chat.turn") as span,
            turn_context(self.turn_id, self.request.user_id),  # ids on every log line
        ):
            span.set_attribute("turn.agent", self.agent.name)
            capture_content(span, "app.capture.user_message", self.request.message)
            try:
                failure = await self._attempt(progress, emit, span)
                outcome = await self._end(failure, progress, emit)
                # Let the stream's consumer send the last event (and after `done`, end the
                # response) before the bookkeeping below.
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                # The client left or the task was cancelled. A turn past its commit point
                # succeeded: it keeps its one `complete` row. Otherwise the ledger is dropped,
                # nothing is committed, and the row says `interrupted`.
                self.cancel_event.set()
                settled = self.settled
                outcome = settled.finish if settled else "cancelled"
                if settled is None:
                    self._discard()
                await self._end_transcript(progress, "complete" if settled else "interrupted")
                raise
            finally:
                capture_content(span, "app.capture.model_output", progress.answer)
                span.set_attribute("turn.outcome", outcome)
                span.set_attribute("turn.rounds", progress.rounds)
                spent, opened = progress.usage, self.context
                turn_finished(
                    turn_id=self.turn_id,
                    agent=self.agent.name,
                    outcome=outcome,
                    rounds=progress.rounds,
                    duration_seconds=time.perf_counter() - started,
                    conversation_id=opened.conversation_id if opened else None,
                    memory_status=opened.memory_status if opened else None,
                    prompt_tokens=spent.input_tokens if spent else None,
                    completion_tokens=spent.output_tokens if spent else None,
                )

    async def _attempt(self, progress: Progress, emit: Emit, span: trace.Span) -> ErrorEvent | None:
        """Play the turn under its deadline; a failure becomes the error event that ends it."""
        settings = self.services.settings
        seconds = min(settings.turn_timeout_seconds, settings.stream_max_seconds)
        token_left = token_seconds_left(self.request.accepted_until)
        ends_with_token = token_left is not None and token_left < seconds
        try:
            async with asyncio.timeout(token_left if ends_with_token else seconds) as deadline:
                await self._play(progress, emit, span)
        except Exception as error:
            if isinstance(error, TimeoutError):
                self.cancel_event.set()
                if ends_with_token and deadline.expired():
                    error = TurnFailure(TOKEN_EXPIRED, TOKEN_EXPIRED_MESSAGE)
            return failure_event(error, turn_id=self.turn_id)
        return None

    async def _play(self, progress: Progress, emit: Emit, span: trace.Span) -> None:
        """Start, model rounds, then the commit point; the memory event follows the commit at
        once, before anything else can happen to the turn."""
        ctx = self.context = await open_turn(
            self.request,
            self.services,
            turn_id=self.turn_id,
            uses_memory=self.agent.uses_memory,
            cancel_event=self.cancel_event,
        )
        span.set_attribute("memory.status", ctx.memory_status)
        emit(StartEvent(ctx.conversation_id, ctx.turn_id, ctx.memory_status, ctx.transcript_status))
        recalled = await recall_for_turn(ctx, self.request, self.services)
        finish = await run_rounds(
            ctx,
            self.agent,
            self.request,
            self.services.settings.llm_max_rounds,
            progress,
            emit,
            recalled,
        )
        settled = await self.commit_point.settle(ctx, finish)
        settled.reported = True
        emit(settled.event)

    async def _end(self, failure: ErrorEvent | None, progress: Progress, emit: Emit) -> str:
        """Write the turn's one assistant row and send its last event; returns the outcome."""
        settled = self.settled
        if settled is None:
            assert failure is not None  # a turn that did not fail always reaches its commit point
            self._discard()
            emit(failure)
            await self._end_transcript(progress, "failed")
            return failure.code
        # Settled, possibly in a race with the deadline: the commit's answer stands.
        if not settled.reported:
            settled.reported = True
            emit(settled.event)
        if not await self._end_transcript(progress, "complete"):
            # `done` promises that the conversation holds the whole turn (a failover can lose
            # the write): say so instead. The memory event above stands as it was reported.
            emit(ErrorEvent(TRANSCRIPT_FAILED, TRANSCRIPT_FAILED_MESSAGE))
            return TRANSCRIPT_FAILED
        if self._has_sources and self.context is not None:
            emit(SourcesEvent(self.context.sources.data()))
        emit(DoneEvent(settled.finish, progress.usage))
        return settled.finish

    async def end_unplayed(self) -> None:
        """For a response that ended before the turn ran (its client left first): a user
        message the route already stored gets the turn's one assistant row, `interrupted`."""
        if self.request.memory_read is not None:
            self.request.memory_read.abandon()
        if not self._ran:
            self._ran = True
            await self._end_transcript(Progress(model=self.agent.model.primary), "interrupted")

    @property
    def _has_sources(self) -> bool:
        """Sources are the person's: on the authenticated agent's turns only."""
        return self.agent.uses_memory and self.request.user_id is not None

    def _discard(self) -> None:
        if self.context is not None:
            self.context.ledger = None

    async def _end_transcript(self, progress: Progress, status: MessageStatus) -> bool:
        """The turn's one assistant row, with the turn's token usage in the same transaction.
        It is written once: a second call (a cancellation arriving while the first write
        runs) waits for the same write. False when a turn that has a conversation could not
        store it."""
        if self._transcript is None:
            self._transcript = asyncio.ensure_future(self._store_answer(progress, status))
        return await finish_even_if_cancelled(self._transcript)

    async def _store_answer(self, progress: Progress, status: MessageStatus) -> bool:
        conversations, ctx = self.services.conversations, self.context
        if ctx is not None:
            conversation_id = ctx.conversation_id
        elif self.request.stored_in is not None:
            # The turn ended before its opening (cancelled, or the database too busy to open
            # it), but its admission had stored its message: the answer's row still follows it.
            conversation_id = self.request.stored_in
        else:
            return True
        spent, release = self._spent(progress), self._slot_release()
        if (
            conversation_id is not None
            and conversations is not None
            and self.request.store_transcript
        ):
            # The sources of a complete answer go with it: a reload shows them.
            sources = ctx.sources if ctx is not None and status == "complete" else None
            return await conversations.append(
                conversation_id,
                self.turn_id,
                "assistant",
                progress.answer,
                status,
                usage=spent,
                release=release,
                sources=sources.to_json() if sources is not None and self._has_sources else None,
            )
        if spent is not None and self.services.usage is not None:
            # No transcript on this route (or the start could not store one: `start` said so):
            # usage on its own.
            await self.services.usage.record(spent, release)
        return True

    def _slot_release(self) -> SlotRelease | None:
        """The turn's stream slot, freed by the transaction that ends the turn; if that one
        does not commit, the route frees the slot when the response ends."""
        admission, limits = self.request.admission, self.services.limits
        if admission is None or limits is None:
            return None
        return limits.release_with(admission)

    def _spent(self, progress: Progress) -> TurnUsage | None:
        """The user's tokens for this turn, when the model reported them."""
        user_id, usage = self.request.user_id, progress.usage
        if user_id is None or usage is None or not (usage.input_tokens or usage.output_tokens):
            return None
        return TurnUsage(user_id, usage.input_tokens, usage.output_tokens)
