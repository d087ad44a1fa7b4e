"""The memory feature flag: stored in the database, cached per process for a few seconds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import structlog
from sqlalchemy import Engine, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from app.concurrency import to_thread
from app.db.admission import admitted
from app.db.deadline import within
from app.db.engine import one_statement_read
from app.db.schema import feature_flags
from app.operators import audit
from app.telemetry.metrics import remember_flag_state

log = structlog.get_logger(__name__)

MEMORY_FLAG = "memory"
KNOWN_FLAGS = (MEMORY_FLAG,)


@dataclass(frozen=True)
class FlagState:
    name: str
    enabled: bool
    source: str  # "database" once an operator set it, else "default" (MEMORY_ENABLED)
    updated_by: str | None = None


def read_flag(engine: Engine, name: str, default: bool) -> FlagState:
    """The stored flag, or `default` (source "default") when no operator has set it yet."""
    with engine.connect() as connection:
        one_statement_read(connection)
        row = connection.execute(
            select(feature_flags.c.enabled, feature_flags.c.updated_by).where(
                feature_flags.c.name == name
            )
        ).first()
    if row is None:
        return FlagState(name=name, enabled=default, source="default")
    return FlagState(
        name=name, enabled=bool(row.enabled), source="database", updated_by=row.updated_by
    )


def write_flag(engine: Engine, name: str, enabled: bool, updated_by: str | None) -> FlagState:
    """Upsert portably: update, and insert when no row was there (retry once on a race). The
    switch is audited (who, from, to) in the same transaction: a switch that rolls back leaves
    no audit row, and a committed one always has its row."""
    for _attempt in range(2):
        try:
            with engine.begin() as connection:
                previous = connection.execute(
                    select(feature_flags.c.enabled)
                    .where(feature_flags.c.name == name)
                    .with_for_update()
                ).scalar()
                result = connection.execute(
                    update(feature_flags)
                    .where(feature_flags.c.name == name)
                    .values(
                        enabled=enabled, updated_by=updated_by, updated_at=func.current_timestamp()
                    )
                )
                if not result.rowcount:
                    connection.execute(
                        insert(feature_flags).values(
                            name=name, enabled=enabled, updated_by=updated_by
                        )
                    )
                audit.record(
                    connection,
                    updated_by or "unknown",
                    "flag.set",
                    name,
                    None if previous is None else {"enabled": bool(previous)},
                    {"enabled": enabled},
                )
            break
        except Exception:
            if _attempt:
                raise
    remember_flag_state(name, "enabled" if enabled else "disabled")
    return FlagState(name=name, enabled=enabled, source="database", updated_by=updated_by)


def seed_flag(engine: Engine, name: str, enabled: bool, updated_by: str) -> FlagState:
    """Store `enabled` unless the flag is already stored; returns the stored state.

    For `serve`, whose embedded default (memory on) would otherwise live only in its own
    environment: stored, every reader (the CLI, other processes) sees the same effective flag.
    """
    state = read_flag(engine, name, enabled)
    if state.source == "database":
        return state
    try:
        with engine.begin() as connection:
            connection.execute(
                insert(feature_flags).values(name=name, enabled=enabled, updated_by=updated_by)
            )
            audit.record(connection, updated_by, "flag.seed", name, None, {"enabled": enabled})
    except IntegrityError:  # another process stored it first: theirs stands
        return read_flag(engine, name, enabled)
    return FlagState(name=name, enabled=enabled, source="database", updated_by=updated_by)


class FlagUnavailableError(RuntimeError):
    """The flags table could not be read within its bound: memory is off for this request."""


FlagStatus = Literal["enabled", "disabled", "unavailable"]


class FlagStore:
    """Process-local cache in front of the flags table; every replica converges within `ttl`.

    The rule, fail-closed: a value read from the database is used for `ttl_seconds` after the
    read, never longer. A read that fails or does not answer within `read_timeout_seconds` makes
    the flag unavailable (memory off, writes off) for the same `ttl_seconds`; it never falls
    back to MEMORY_ENABLED, which applies only when the table was read and holds no row. Reads
    are single-flight: while one read is in flight every caller waits for that same read, each
    for at most its own bound, so one hanging read never queues requests behind it.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        default_memory: bool,
        ttl_seconds: float,
        read_timeout_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.default_memory = default_memory
        self.ttl_seconds = ttl_seconds
        self.read_timeout_seconds = read_timeout_seconds
        self._clock = clock
        # name -> (when it was read, the state, or None when the read failed)
        self._cached: dict[str, tuple[float, FlagState | None]] = {}
        # name -> (when the in-flight read started, its task): the single-flight read
        self._reads: dict[str, tuple[float, asyncio.Task[FlagState | None]]] = {}

    def _default(self, name: str) -> bool:
        return self.default_memory if name == MEMORY_FLAG else False

    def now(self) -> float:
        """This store's clock, for `read_since`."""
        return self._clock()

    def _fresh(self, name: str, since: float | None) -> tuple[float, FlagState | None] | None:
        cached = self._cached.get(name)
        if cached is None or self._clock() - cached[0] >= self.ttl_seconds:
            return None
        if since is not None and cached[0] < since:
            return None
        return cached

    def _remember(self, name: str, read_at: float, state: FlagState | None) -> None:
        cached = self._cached.get(name)
        if cached is None or cached[0] <= read_at:  # an operator's newer `set` wins
            self._cached[name] = (read_at, state)

    async def _read(self, name: str) -> FlagState | None:
        read_at = self._clock()
        try:
            state = await within(
                self.read_timeout_seconds,
                lambda: to_thread(read_flag, self.engine, name, self._default(name)),
                what="flag read",
            )
        except Exception as error:
            log.warning("flags.read_failed", flag=name, error_type=type(error).__name__)
            state = None
        self._remember(name, read_at, state)
        if name == MEMORY_FLAG:
            remember_flag_state(
                name, "unavailable" if state is None else "enabled" if state.enabled else "disabled"
            )
        return state

    async def get(
        self,
        name: str = MEMORY_FLAG,
        *,
        seconds: float | None = None,
        read_since: float | None = None,
    ) -> FlagState:
        """The flag's state, waiting at most `seconds` (default: the read timeout). With
        `read_since` (a time of `now()`), only a value read at or after it is used: the commit
        point asks for one no older than its turn.

        Raises FlagUnavailableError when the table cannot be read within that bound. A read
        first waits its turn for a database worker (`app.db.admission`): that wait is a busy
        database, not a silent one, and is not counted in the bound.
        """
        cached = self._fresh(name, read_since)
        if cached is not None and cached[1] is not None:
            return cached[1]
        async with admitted():
            return await self._get(name, seconds=seconds, read_since=read_since)

    async def _get(
        self, name: str, *, seconds: float | None, read_since: float | None
    ) -> FlagState:
        cached = self._fresh(name, read_since)
        if cached is None:
            started, read = self._reads.get(name, (None, None))
            if read is None or (
                read_since is not None and started is not None and started < read_since
            ):
                started = self._clock()
                read = asyncio.ensure_future(self._read(name))
                self._reads[name] = (started, read)

                def forget(task: asyncio.Future[FlagState | None], name: str = name) -> None:
                    if self._reads.get(name, (None, None))[1] is task:
                        del self._reads[name]

                read.add_done_callback(forget)
            bound = self.read_timeout_seconds if seconds is None else seconds
            try:
                # Shielded: a caller that stops waiting leaves the shared read to the others.
                state = await asyncio.wait_for(asyncio.shield(read), max(bound, 0.0))
            except TimeoutError:
                raise FlagUnavailableError(f"flag {name!r} not read within {bound:g} s") from None
        else:
            state = cached[1]
        if state is None:
            raise FlagUnavailableError(f"flag {name!r} could not be read")
        return state

    async def memory_status(
        self, *, seconds: float | None = None, read_since: float | None = None
    ) -> FlagStatus:
        try:
            state = await self.get(MEMORY_FLAG, seconds=seconds, read_since=read_since)
        except FlagUnavailableError:
            return "unavailable"
        return "enabled" if state.enabled else "disabled"

    async def memory_enabled(self) -> bool:
        """Whether memory is on for this request: off while the flag cannot be read."""
        return await self.memory_status() == "enabled"

    async def set(self, name: str, enabled: bool, updated_by: str | None) -> FlagState:
        state = await to_thread(write_flag, self.engine, name, enabled, updated_by)
        self._cached[name] = (self._clock(), state)
        return state
