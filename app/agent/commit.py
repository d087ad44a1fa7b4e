"""The commit point of a turn and its report: only a final answer commits, with the flag read
again and the staged batches replayed on the latest memory in one transaction in a worker
thread; whatever happens, the turn leaves here settled with the memory event that says so."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from opentelemetry import trace

from app.agent.context import TurnContext
from app.agent.events import CommitOutcome, FinishReason, MemoryEvent
from app.agent.request import TurnServices
from app.agent.sources import MemoryUpdate, change_sources
from app.concurrency import finish_even_if_cancelled
from app.memory.flags import FlagStatus
from app.memory.ledger import MemoryLedger
from app.memory.projects import ProjectNotFoundError, Scope
from app.memory.provenance import Provenance
from app.memory.rules import MemoryValidationError, Snapshot
from app.memory.service import CommitResult
from app.memory.writes import SubjectErasedError
from app.telemetry import count_targets, memory_event, start_span

tracer = trace.get_tracer(__name__)


@dataclass
class Settled:
    """A turn past its commit point: how it finished and the memory event that reports it."""

    finish: FinishReason
    event: MemoryEvent
    reported: bool = False


class CommitPoint:
    """Decides, once, what a turn's staged edits become. `settled` is set as soon as that is
    known, also when the commit lands while the turn is being cancelled: then the turn did
    succeed, and says so."""

    def __init__(self, services: TurnServices) -> None:
        self.services = services
        self.settled: Settled | None = None

    async def settle(self, ctx: TurnContext, finish: FinishReason) -> Settled:
        """A turn that ended at the tool limit or was cut by the token limit has no final
        answer and discards what it staged (`failed`, with that reason). What became of staged
        edits goes into the turn's sources too (a reload labels the answer's chip from it)."""
        staged = ctx.ledger is not None and bool(ctx.ledger.staged)
        settled = await self._settle(ctx, finish)
        if staged:
            event = settled.event
            ctx.sources.memory_update = MemoryUpdate(event.outcome, event.reason)
        return settled

    async def _settle(self, ctx: TurnContext, finish: FinishReason) -> Settled:
        ledger = ctx.ledger
        if ledger is None or not ledger.staged:
            # Without a read, the baseline's counts are not the stored ones: none are claimed.
            known = ctx.baseline if ctx.baseline_read else None
            return self._seal(finish, "none", known)
        ctx.ledger = None  # from here on nothing more is staged, and a failure discards it
        if finish != "stop":
            report_commit(ledger, "failed", ctx.baseline, reason=finish)
            return self._seal(finish, "failed", ctx.baseline, reason=finish)
        flag = await self._flag_at_commit(ctx)
        if flag == "disabled":
            # An operator switched memory off during the turn: never committed behind the switch.
            report_commit(ledger, "none", ctx.baseline, reason="memory_disabled")
            return self._seal(finish, "none", ctx.baseline)
        if flag == "unavailable":
            report_commit(ledger, "failed", ctx.baseline, reason="memory_unavailable")
            return self._seal(finish, "failed", ctx.baseline, reason="memory_unavailable")
        return await self._commit(ctx, ledger, finish)

    async def _flag_at_commit(self, ctx: TurnContext) -> FlagStatus:
        """The flag read again at the commit point, from no cache older than this turn."""
        flags = self.services.flags
        if flags is None:
            return "unavailable"
        return await flags.memory_status(
            seconds=self.services.settings.flag_read_timeout_seconds, read_since=ctx.opened_at
        )

    async def _commit(
        self, ctx: TurnContext, ledger: MemoryLedger, finish: FinishReason
    ) -> Settled:
        memory = self.services.memory
        assert memory is not None and ctx.user_id is not None  # a ledger exists only then
        started = time.perf_counter()
        # report_commit() puts the memory event on this span too (memory.* attributes).
        with start_span(tracer, "memory.commit"):
            task = asyncio.ensure_future(
                memory.commit_in_worker(
                    ctx.user_id,
                    list(ledger.batches),
                    ctx.cancel_event,
                    provenance=Provenance("turn", ctx.turn_id, ctx.conversation_id),
                    may_propose=True,  # the user's save mode decides, inside the transaction
                    begun_at=ctx.begun_at,
                    scope=Scope(ctx.project_id, owner=False),
                )
            )
            try:
                result = await finish_even_if_cancelled(
                    task, on_cancel=ctx.cancel_event.set, cleanup_seconds=None
                )
            except asyncio.CancelledError:
                if task.done() and not task.cancelled() and task.exception() is None:
                    # The worker passed its last check before the cancellation reached it: the
                    # commit landed, so the turn succeeded whatever happens to the client now.
                    self._committed(ledger, finish, task.result(), started, ctx)
                else:
                    report_commit(ledger, "cancelled", ctx.baseline, started=started)
                raise
            except MemoryValidationError as error:
                # The latest stored memory no longer accepts the batch (a concurrent change,
                # e.g. the entry an edit was made against is gone): refused whole.
                report_commit(ledger, "failed", ctx.baseline, reason=error.code, started=started)
                return self._seal(finish, "failed", ctx.baseline, reason=error.code)
            except SubjectErasedError:
                # The person was erased while this turn ran: there is nothing to write into.
                report_commit(ledger, "failed", ctx.baseline, reason="erased", started=started)
                return self._seal(finish, "failed", ctx.baseline, reason="erased")
            except ProjectNotFoundError:
                # The turn's project was deleted while it ran: its scope is gone, so nothing of
                # the turn is written anywhere else (not even the user profile's part).
                report_commit(
                    ledger, "failed", ctx.baseline, reason="project_deleted", started=started
                )
                return self._seal(finish, "failed", ctx.baseline, reason="project_deleted")
            except Exception as error:
                report_commit(
                    ledger, "failed", ctx.baseline, reason=type(error).__name__, started=started
                )
                return self._seal(finish, "failed", ctx.baseline, reason="memory_unavailable")
            return self._committed(ledger, finish, result, started, ctx)

    def _committed(
        self,
        ledger: MemoryLedger,
        finish: FinishReason,
        result: CommitResult,
        started: float,
        ctx: TurnContext | None = None,
    ) -> Settled:
        outcome: CommitOutcome = "committed" if result.changed else "none"
        if result.proposal_id is not None:
            outcome = "proposed"  # ask before saving: stored for the user, memory unchanged
        if ctx is not None and outcome == "proposed":
            ctx.sources.changes = change_sources(ledger.operations, "proposed")
        elif ctx is not None and outcome == "committed":
            ctx.sources.changes = change_sources(ledger.operations, "committed")
        report_commit(
            ledger, outcome, result.snapshot, retry_count=result.retry_count, started=started
        )
        return self._seal(finish, outcome, result.snapshot)

    def _seal(
        self,
        finish: FinishReason,
        outcome: CommitOutcome,
        snapshot: Snapshot | None,
        *,
        reason: str | None = None,
    ) -> Settled:
        usage = snapshot.usage() if snapshot is not None else None
        self.settled = Settled(finish, MemoryEvent(outcome, usage, reason=reason))
        return self.settled


def report_commit(
    ledger: MemoryLedger,
    outcome: str,
    snapshot: Snapshot,
    *,
    retry_count: int = 0,
    reason: str | None = None,
    started: float | None = None,
) -> None:
    """The memory event of the design (docs/design.md) for this commit: log line and span."""
    memory_event(
        stage="commit",
        outcome=outcome,
        reason=reason,
        operation_count=len(ledger.operations),
        targets=count_targets(ledger.operations),
        usage=snapshot.usage(),
        duration_ms=(time.perf_counter() - started) * 1000 if started is not None else 0.0,
        retry_count=retry_count,
    )
