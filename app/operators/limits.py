"""Per-caller limits that hold across workers and replicas: open streams, turns per minute and
a daily model-token budget, kept in the service's own database.

One admission is one short transaction. It first updates the caller's counter row (the turns of
the current minute), which also makes it the caller's lock: two replicas admitting the same
user take turns, so the stream count read next cannot be stale. It then checks the day's usage
against the budget and takes a stream slot: a lease row that expires on its own after the
longest a turn can stream, so a crashed worker's slots free themselves. Anything over a limit
rolls the whole transaction back (a refused request uses none of the caller's allowance) and
answers 429 with Retry-After. A turn's user message can share the transaction (`admit_with`):
it is stored only when the turn is admitted. Releasing the slot is one DELETE: in the
transaction of the turn's answer row, which ends the stream anyway, or else on its own when
the stream ends (in autocommit on PostgreSQL: a statement that commits itself).

A database that does not answer within the bound does not switch the limits off: the process
falls back to its own count of the caller (`LocalShare`), admitting up to its share of each
limit (the limit divided by LIMITS_REPLICAS, the serving processes in all; at least one), logged
and counted. Limits protect the service; a database hiccup neither refuses every turn nor lets
one person open as many streams as they like: across N processes a person holds at most the
limit plus N local shares (about twice the limit) while the database is slow.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Literal, TypeVar

import structlog
from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    Insert,
    Integer,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError, OperationalError

from app.concurrency import finish_even_if_cancelled, to_thread
from app.db.admission import DatabaseBusyError
from app.db.deadline import DeadlineExceededError, Handover, Later, within, within_staged
from app.db.engine import SQLITE_IMMEDIATE, one_statement_write
from app.db.schema import limit_counters, stream_slots, usage_daily
from app.errors import AppError
from app.operators import usage
from app.telemetry import metrics

log = structlog.get_logger(__name__)

T = TypeVar("T")
R = TypeVar("R")

# "import": a person's imports (POST /v1/memory/import), counted apart from their turns.
CallerKind = Literal["user", "eval", "import"]
LimitName = Literal["streams", "turns_per_minute", "daily_tokens"]
# A refused stream has no known end: the client is told to try again shortly.
STREAMS_RETRY_SECONDS = 2
ADMIT_ATTEMPTS = 3


@dataclass(frozen=True)
class Caller:
    """Who a limit counts: a user by subject, or the evaluation route by a hash of its key."""

    kind: CallerKind
    key: str

    @classmethod
    def user(cls, subject: str) -> Caller:
        return cls("user", subject)

    @classmethod
    def importer(cls, subject: str) -> Caller:
        return cls("import", subject)

    @classmethod
    def evaluator(cls, eval_key: str) -> Caller:
        return cls("eval", hashlib.sha256(b"eval-key:" + eval_key.encode()).hexdigest())


@dataclass(frozen=True)
class Limits:
    """Each limit `0` = off."""

    max_streams: int = 0
    turns_per_minute: int = 0
    daily_tokens: int = 0

    @property
    def off(self) -> bool:
        return not (self.max_streams or self.turns_per_minute or self.daily_tokens)


class RateLimited(AppError):
    status_code = 429
    code = "rate_limited"

    def __init__(self, message: str, *, limit: LimitName, retry_after: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.retry_after = max(1, retry_after)
        self.headers = {"Retry-After": str(self.retry_after)}


class LocalSlot:
    """One stream of a caller in this process's own count, until freed or, like a lease, until
    it expires (a slot whose release was lost does not count for ever)."""

    __slots__ = ("_caller", "_streams", "expires")

    def __init__(
        self, streams: dict[Caller, set[LocalSlot]], caller: Caller, expires: float
    ) -> None:
        self._streams: dict[Caller, set[LocalSlot]] | None = streams
        self._caller = caller
        self.expires = expires
        streams.setdefault(caller, set()).add(self)

    def free(self) -> None:
        streams, self._streams = self._streams, None
        if streams is None:
            return
        held = streams.get(self._caller)
        if held is not None:
            held.discard(self)
            if not held:
                del streams[self._caller]


class LocalShare:
    """This process's own count of each caller's open streams and turns of the minute, kept
    for every admission and used alone when the shared check cannot answer: the caller is then
    admitted up to `share(limit)`. Touched only on the event loop's thread."""

    def __init__(
        self,
        processes: int,
        lease_seconds: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.processes = processes
        self.lease_seconds = lease_seconds
        self._monotonic = monotonic
        self._streams: dict[Caller, set[LocalSlot]] = {}
        self._turns: dict[Caller, tuple[int, int]] = {}  # (minute, turns in it)

    def streams(self, caller: Caller) -> int:
        """The caller's live streams in this process (expired slots dropped)."""
        now = self._monotonic()
        for slot in [slot for slot in self._streams.get(caller, ()) if slot.expires <= now]:
            slot.free()
        return len(self._streams.get(caller, ()))

    def share(self, limit: int) -> int:
        return max(1, limit // self.processes)

    def turns(self, caller: Caller, minute: int) -> int:
        counted = self._turns.get(caller)
        return counted[1] if counted is not None and counted[0] == minute else 0

    def count(self, admission: Admission, limits: Limits, minute: int) -> None:
        """Count an admitted request: its turn of the minute, and its stream while it lasts."""
        if limits.turns_per_minute:
            if len(self._turns) > MAX_LOCAL_CALLERS:  # callers of earlier minutes
                self._turns = {c: t for c, t in self._turns.items() if t[0] == minute}
            self._turns[admission.caller] = (minute, self.turns(admission.caller, minute) + 1)
        if limits.max_streams and admission.local is None:
            expires = self._monotonic() + self.lease_seconds
            admission.local = LocalSlot(self._streams, admission.caller, expires)

    def check_whole(self, caller: Caller, limits: Limits) -> None:
        """Raise RateLimited when this process alone holds the caller's whole stream limit:
        refused at once, whatever the database would say (its slots may be missing the ones
        admitted while it was slow)."""
        if limits.max_streams and self.streams(caller) >= limits.max_streams:
            raise _too_many_streams(limits.max_streams)

    def check(self, caller: Caller, limits: Limits, minute: int, now: datetime) -> None:
        """Raise RateLimited when the caller is at this process's share of a limit."""
        if limits.max_streams:
            share = self.share(limits.max_streams)
            if self.streams(caller) >= share:
                raise RateLimited(
                    f"Too many answers at once: at most {share} at a time while limits are "
                    "checked locally.",
                    limit="streams",
                    retry_after=STREAMS_RETRY_SECONDS,
                )
        if limits.turns_per_minute:
            share = self.share(limits.turns_per_minute)
            if self.turns(caller, minute) >= share:
                raise RateLimited(
                    f"Too many turns: at most {share} a minute while limits are checked locally.",
                    limit="turns_per_minute",
                    retry_after=math.ceil((minute + 1) * 60 - now.timestamp()),
                )


# A bound on the callers whose turns a process remembers before it forgets earlier minutes'.
MAX_LOCAL_CALLERS = 10_000


@dataclass
class Admission:
    """An admitted request; `lease_id` is its stream slot (None: no slot was taken); `local`
    its place in this process's own count of the caller's streams (`LocalShare`)."""

    caller: Caller
    lease_id: str | None = None
    released: bool = False
    local: LocalSlot | None = None

    @property
    def holds_slot(self) -> bool:
        """Whether the request's end has a stream slot to free (shared or local)."""
        return self.lease_id is not None or self.local is not None


@dataclass(frozen=True)
class SlotRelease:
    """A stream slot's release carried by another transaction (`run` in it); once that
    transaction has committed, `committed()` marks the admission released."""

    admission: Admission
    values: Mapping[str, object]

    def run(self, connection: Connection) -> None:
        """Free the slot in the caller's transaction: it goes when that transaction commits,
        and stays (for the route's own release) when it rolls back."""
        connection.execute(RELEASE, self.values)

    def committed(self) -> None:
        self.admission.released = True
        if self.admission.local is not None:  # freed with the shared slot, at the same moment
            self.admission.local.free()


def _naive(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None)


def _next_midnight(now: datetime) -> datetime:
    return datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), tzinfo=UTC)


class LimitStore:
    def __init__(
        self,
        engine: Engine,
        *,
        lease_seconds: float,
        timeout_seconds: float,
        processes: int = 1,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.engine = engine
        self.lease_seconds = lease_seconds
        self.timeout_seconds = timeout_seconds
        self.local = LocalShare(processes, lease_seconds)
        self.clock = clock  # tests pin it to a moment

    async def admit(self, caller: Caller, limits: Limits) -> Admission:
        """Admit a request or raise RateLimited; with every limit off, nothing is read."""
        if limits.off:
            return Admission(caller)
        self._whole(caller, limits)
        try:
            admission, _nothing = await self._checked(caller, limits, _no_work)
        except RateLimited:
            raise
        except Exception as error:
            return self._waived(caller, limits, error)
        return self._counted(admission, limits)

    def _whole(self, caller: Caller, limits: Limits) -> None:
        try:
            self.local.check_whole(caller, limits)
        except RateLimited as refused:
            metrics.rate_limited(caller.kind, refused.limit)
            raise

    def _counted(self, admission: Admission, limits: Limits) -> Admission:
        self.local.count(admission, limits, _minute(self.clock()))
        return admission

    async def admit_with(
        self,
        caller: Caller,
        limits: Limits,
        work: Callable[[Connection], T] | None,
        then: Callable[[Connection], R] | None = None,
    ) -> tuple[Admission, T | None, Later[R] | None]:
        """Admit a request as `admit` does, with `work` in the admission's transaction (the
        turn's user message: one worker-thread hop, checkout and commit fewer before the first
        text). The work runs first; a refusal rolls it back with the rest. With every limit
        off the transaction holds the work alone (nothing is counted), so a turn starts by one
        path whatever the limits; with no work and no `then` either, nothing is read.

        `then` (the turn's memory read) runs next on the same connection in the same worker
        thread, after the commit and outside the transaction: one more hop and checkout fewer.
        It comes back as a `Later`, awaited by its own deadline (`Later.result`); whatever it
        does or raises changes nothing of the admission.

        The work's result and the `Later` are None when they were not done: the shared
        transaction failed, after which the admission is taken as `admit` takes it (on its own,
        or waived when the database is slow or busy) and the caller does the work itself, as
        if this had not been tried."""
        if work is None and then is None:
            return await self.admit(caller, limits), None, None
        self._whole(caller, limits)
        job: Callable[[Connection], T | None] = work if work is not None else _no_work
        try:
            if then is None:
                admission, done = await self._checked(caller, limits, job)
                return admission, done, None
            (admission, done), later = await self._staged(caller, limits, job, then)
        except RateLimited:
            raise
        except Exception as error:
            return await self._after_shared_failure(caller, limits, error), None, None
        return self._counted(admission, limits), done, later

    async def _after_shared_failure(
        self, caller: Caller, limits: Limits, error: Exception
    ) -> Admission:
        if limits.off:  # nothing was counted: the work alone failed, the caller does it again
            log.warning("limits.shared_write_failed", error_type=type(error).__name__)
            return Admission(caller)
        if isinstance(error, DeadlineExceededError | DatabaseBusyError):
            # A second try would wait as long again: admit on the local count, as `admit` does.
            return self._waived(caller, limits, error)
        log.warning("limits.shared_write_failed", error_type=type(error).__name__)
        return await self.admit(caller, limits)

    async def _staged(
        self,
        caller: Caller,
        limits: Limits,
        work: Callable[[Connection], T],
        then: Callable[[Connection], R],
    ) -> tuple[tuple[Admission, T], Later[R]]:
        def admit_and_read(handover: Handover[tuple[Admission, T]]) -> R:
            def after(connection: Connection, admitted: tuple[Admission, T]) -> R:
                handover(admitted)  # the caller's from here: nothing below undoes it
                return then(connection)

            return self._admitting(caller, limits, work, after)

        try:
            return await within_staged(
                self.timeout_seconds,
                lambda handover: to_thread(admit_and_read, handover),
                what="limit check",
                rest="memory read",
            )
        except RateLimited as refused:
            metrics.rate_limited(caller.kind, refused.limit)
            raise

    async def _checked(
        self, caller: Caller, limits: Limits, work: Callable[[Connection], T]
    ) -> tuple[Admission, T]:
        """The admission's transaction (with `work`) under the limit check's deadline; a
        refusal is counted and raised."""
        try:
            return await within(
                self.timeout_seconds,
                lambda: to_thread(self._admit_with, caller, limits, work),
                what="limit check",
            )
        except RateLimited as refused:
            metrics.rate_limited(caller.kind, refused.limit)
            raise

    def _waived(self, caller: Caller, limits: Limits, error: Exception) -> Admission:
        """A check the database did not answer (logged and counted): the request is admitted
        on this process's own count, up to its share of each limit, or refused (RateLimited).
        The daily budget is not checked (its spending is only in the database)."""
        log.warning("limits.check_failed", caller=caller.kind, error_type=type(error).__name__)
        metrics.limit_check_failed()
        now = self.clock()
        try:
            self.local.check(caller, limits, _minute(now), now)
        except RateLimited as refused:
            metrics.rate_limited(caller.kind, refused.limit)
            raise
        return self._counted(Admission(caller), limits)

    def release_with(self, admission: Admission) -> SlotRelease | None:
        """The admission's slot release as a statement for a transaction of the caller's (the
        turn's answer row): its commit frees the slot, one worker-thread hop, checkout and
        commit fewer than `release`, which then has nothing left to do. None: no slot to free."""
        if admission.lease_id is None or admission.released:
            return None
        return SlotRelease(admission, self._release_values(admission))

    async def release(self, admission: Admission) -> None:
        """Free the admission's stream slot (once; even while the caller is being cancelled)."""
        if admission.local is not None:
            admission.local.free()
        if admission.lease_id is None or admission.released:
            return
        admission.released = True
        try:
            await finish_even_if_cancelled(
                asyncio.ensure_future(to_thread(self._release, admission))
            )
        except Exception as error:  # the lease expires on its own
            log.warning("limits.release_failed", error_type=type(error).__name__)

    # -- in a worker thread ---------------------------------------------------------------------

    def _admit(self, caller: Caller, limits: Limits) -> Admission:
        return self._admit_with(caller, limits, _no_work)[0]

    def _admit_with(
        self, caller: Caller, limits: Limits, work: Callable[[Connection], T]
    ) -> tuple[Admission, T]:
        return self._admitting(caller, limits, work, _as_admitted)

    def _admitting(
        self,
        caller: Caller,
        limits: Limits,
        work: Callable[[Connection], T],
        after: Callable[[Connection, tuple[Admission, T]], R],
    ) -> R:
        """The admission's transaction with `work`, then `after` on its connection, once the
        transaction has committed."""
        committed = False
        for attempt in range(ADMIT_ATTEMPTS):
            try:
                with self.engine.connect() as connection:
                    connection = connection.execution_options(**{SQLITE_IMMEDIATE: True})
                    with connection.begin():
                        # The work first: its row locks (the conversation's) are taken in the
                        # order the turn's answer row takes them, before the slots that row
                        # frees, so the two transactions cannot wait on each other in a cycle.
                        done = work(connection)
                        admission = (
                            Admission(caller)
                            if limits.off
                            else self._check(connection, caller, limits)
                        )
                        admitted = admission, done
                    committed = True
                    # What follows only reads: on SQLite its BEGIN takes no writer's lock.
                    connection.execution_options(**{SQLITE_IMMEDIATE: False})
                    return after(connection, admitted)
            except (IntegrityError, OperationalError):
                # Two first admissions of one caller inserted its counter row at once (the
                # loser's retry finds the row), or, on MariaDB, their gap locks deadlocked.
                # Never once committed: what follows the commit is not the admission's.
                if committed or attempt == ADMIT_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def _check(self, connection: Connection, caller: Caller, limits: Limits) -> Admission:
        now = self.clock()
        minute = _minute(now)
        turns = _count_turn(connection, caller, minute)  # from here on, the caller's lock
        if limits.turns_per_minute and turns > limits.turns_per_minute:
            what = "imports" if caller.kind == "import" else "turns"
            raise RateLimited(
                f"Too many {what}: at most {limits.turns_per_minute} a minute.",
                limit="turns_per_minute",
                retry_after=math.ceil((minute + 1) * 60 - now.timestamp()),
            )
        budget = limits.daily_tokens if caller.kind == "user" else 0
        if not limits.max_streams:
            if budget and usage.tokens_on(connection, caller.key, now.date()) >= budget:
                raise _over_budget(budget, now)
            return Admission(caller)
        # The slot is inserted only if the caller is under both limits: one statement, run
        # after the lock, so it counts every slot committed before (a round trip saved for
        # each check it folds in).
        stamp = _naive(now)
        lease_id = str(uuid.uuid4())
        take = _take_slot(bool(budget), connection.dialect.insert_returning)
        values = {
            **_caller_values(caller),
            "lease": lease_id,
            "now_stamp": stamp,
            "lease_expiry": stamp + timedelta(seconds=self.lease_seconds),
            "max_streams": limits.max_streams,
            "today": now.date(),
            "budget": budget,
        }
        if connection.dialect.insert_returning:  # rowcount is not reliable for INSERT ... SELECT
            taken = connection.execute(take, values).first() is not None
        else:
            taken = connection.execute(take, values).rowcount == 1
        if taken:
            return Admission(caller, lease_id)
        if budget and usage.tokens_on(connection, caller.key, now.date()) >= budget:
            raise _over_budget(budget, now)
        raise _too_many_streams(limits.max_streams)

    def _release(self, admission: Admission) -> None:
        with self.engine.connect() as connection:
            one_statement_write(connection)
            connection.execute(RELEASE, self._release_values(admission))
            connection.commit()

    def _release_values(self, admission: Admission) -> dict[str, object]:
        return {
            **_caller_values(admission.caller),
            "lease": admission.lease_id,
            "now_stamp": _naive(self.clock()),
        }

    def open_slots(self, caller: Caller) -> int:
        """Unexpired stream slots of one caller (for tests and operators)."""
        with self.engine.connect() as connection:
            return int(
                connection.execute(
                    select(func.count())
                    .select_from(stream_slots)
                    .where(
                        stream_slots.c.kind == caller.kind,
                        stream_slots.c.caller == caller.key,
                        stream_slots.c.expires_at > _naive(self.clock()),
                    )
                ).scalar_one()
            )


def _minute(now: datetime) -> int:
    return math.floor(now.timestamp() / 60)


def _no_work(_connection: Connection) -> None:
    return None


def _as_admitted(_connection: Connection, admitted: tuple[Admission, T]) -> tuple[Admission, T]:
    return admitted


def _too_many_streams(limit: int) -> RateLimited:
    return RateLimited(
        f"Too many answers at once: at most {limit} at a time.",
        limit="streams",
        retry_after=STREAMS_RETRY_SECONDS,
    )


def _over_budget(budget: int, now: datetime) -> RateLimited:
    return RateLimited(
        f"Today's model budget of {budget:,} tokens is used up; it renews at midnight UTC.",
        limit="daily_tokens",
        retry_after=math.ceil((_next_midnight(now) - now).total_seconds()),
    )


# The admission's statements, built once with their values bound at execution (as the memory
# reads are): building them per call costs the admission more CPU than its round trips.
_KIND = bindparam("caller_kind", type_=limit_counters.c.kind.type)
_KEY = bindparam("caller_key", type_=limit_counters.c.caller.type)
_MINUTE = bindparam("this_minute", type_=limit_counters.c.window_start.type)
_CALLERS_ROW = (limit_counters.c.kind == _KIND) & (limit_counters.c.caller == _KEY)
# A new minute starts again at one; the same minute adds one. Ordered: MariaDB assigns left to
# right, and `turns` must compare the window before it moves.
_COUNT = (
    update(limit_counters)
    .where(_CALLERS_ROW)
    .ordered_values(
        (
            limit_counters.c.turns,
            case((limit_counters.c.window_start == _MINUTE, limit_counters.c.turns + 1), else_=1),
        ),
        (limit_counters.c.window_start, _MINUTE),
    )
)
_COUNT_RETURNING = _COUNT.returning(limit_counters.c.turns)
_TURNS = select(limit_counters.c.turns).where(_CALLERS_ROW)
_FIRST_COUNT = insert(limit_counters).values(
    kind=_KIND, caller=_KEY, window_start=_MINUTE, turns=literal(1)
)


# A slot's release; the caller's expired leases (a crashed worker's) go with it. Its values
# bind the names `caller_kind`, `caller_key`, `lease` and `now_stamp` (PostgreSQL carries it in
# the answer row's statement, app/conversations/repository.py).
RELEASE = delete(stream_slots).where(
    or_(
        stream_slots.c.lease_id == bindparam("lease", type_=stream_slots.c.lease_id.type),
        and_(
            stream_slots.c.kind == _KIND,
            stream_slots.c.caller == _KEY,
            stream_slots.c.expires_at
            <= bindparam("now_stamp", type_=stream_slots.c.expires_at.type),
        ),
    )
)


def _caller_values(caller: Caller) -> dict[str, str]:
    return {"caller_kind": caller.kind, "caller_key": caller.key}


@cache
def _take_slot(budget: bool, returning: bool) -> Insert:
    """Insert a stream slot if the caller's live slots are under `max_streams` (and, with a
    budget, the day's tokens under `budget`)."""
    stamp = bindparam("now_stamp", type_=stream_slots.c.expires_at.type)
    live = (
        select(func.count())
        .select_from(stream_slots)
        .where(
            stream_slots.c.kind == _KIND,
            stream_slots.c.caller == _KEY,
            stream_slots.c.expires_at > stamp,
        )
        .scalar_subquery()
    )
    conditions = [live < bindparam("max_streams", type_=Integer())]
    if budget:
        spent = (
            select(usage_daily.c.prompt_tokens + usage_daily.c.completion_tokens)
            .where(
                usage_daily.c.user_id == _KEY,
                usage_daily.c.day == bindparam("today", type_=usage_daily.c.day.type),
            )
            .scalar_subquery()
        )
        conditions.append(func.coalesce(spent, 0) < bindparam("budget", type_=BigInteger()))
    slot = select(
        bindparam("lease", type_=stream_slots.c.lease_id.type),
        _KIND,
        _KEY,
        bindparam("lease_expiry", type_=stream_slots.c.expires_at.type),
    ).where(*conditions)
    take = insert(stream_slots).from_select(["lease_id", "kind", "caller", "expires_at"], slot)
    return take.returning(stream_slots.c.lease_id) if returning else take


def _count_turn(connection: Connection, caller: Caller, minute: int) -> int:
    """Count one turn in the caller's current minute (locking the caller's row); returns the
    minute's turns, this one included."""
    values = {**_caller_values(caller), "this_minute": minute}
    if connection.dialect.update_returning:
        counted = connection.execute(_COUNT_RETURNING, values).scalar()
        if counted is not None:
            return int(counted)
    elif connection.execute(_COUNT, values).rowcount:
        return int(connection.execute(_TURNS, values).scalar_one())
    connection.execute(_FIRST_COUNT, values)
    return 1
