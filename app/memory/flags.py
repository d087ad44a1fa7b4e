"""The memory feature flag: stored in the database, cached per process for a few seconds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine, func, insert, select, update

from app.db.schema import feature_flags

MEMORY_FLAG = "memory"
KNOWN_FLAGS = (MEMORY_FLAG,)


@dataclass(frozen=True)
class FlagState:
    name: str
    enabled: bool
    source: str  # "database" once an operator set it, else "default" (MEMORY_ENABLED)
    updated_by: str | None = None


def read_flag(engine: Engine, name: str, default: bool) -> FlagState:
    with engine.connect() as connection:
        row = connection.execute(
            select(feature_flags.c.enabled, feature_flags.c.updated_by).where(
                feature_flags.c.name == name
            )
        ).first()
    if row is None:
        return FlagState(name=name, enabled=default, source="default")
    return FlagState(name=name, enabled=bool(row.enabled), source="database",
                     updated_by=row.updated_by)


def write_flag(engine: Engine, name: str, enabled: bool, updated_by: str | None) -> FlagState:
    """Upsert portably: update, and insert when no row was there (retry once on a race)."""
    for _attempt in range(2):
        try:
            with engine.begin() as connection:
                result = connection.execute(
                    update(feature_flags)
                    .where(feature_flags.c.name == name)
                    .values(enabled=enabled, updated_by=updated_by,
                            updated_at=func.current_timestamp())
                )
                if not result.rowcount:
                    connection.execute(
                        insert(feature_flags).values(
                            name=name, enabled=enabled, updated_by=updated_by
                        )
                    )
            break
        except Exception:
            if _attempt:
                raise
    return FlagState(name=name, enabled=enabled, source="database", updated_by=updated_by)


class FlagStore:
    """Process-local cache in front of the flags table; every replica converges within `ttl`."""

    def __init__(
        self,
        engine: Engine,
        *,
        default_memory: bool,
        ttl_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.default_memory = default_memory
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._cached: dict[str, tuple[float, FlagState]] = {}
        self._lock = asyncio.Lock()

    def _default(self, name: str) -> bool:
        return self.default_memory if name == MEMORY_FLAG else False

    async def get(self, name: str = MEMORY_FLAG) -> FlagState:
        cached = self._cached.get(name)
        if cached is not None and self._clock() - cached[0] < self.ttl_seconds:
            return cached[1]
        async with self._lock:
            cached = self._cached.get(name)
            if cached is not None and self._clock() - cached[0] < self.ttl_seconds:
                return cached[1]
            try:
                state = await asyncio.to_thread(read_flag, self.engine, name, self._default(name))
            except Exception:
                # The flag table is unreachable: keep the last known value, else the default.
                if cached is not None:
                    return cached[1]
                return FlagState(name=name, enabled=self._default(name), source="default")
            self._cached[name] = (self._clock(), state)
            return state

    async def memory_enabled(self) -> bool:
        return (await self.get(MEMORY_FLAG)).enabled

    async def set(self, name: str, enabled: bool, updated_by: str | None) -> FlagState:
        state = await asyncio.to_thread(write_flag, self.engine, name, enabled, updated_by)
        self._cached[name] = (self._clock(), state)
        return state
