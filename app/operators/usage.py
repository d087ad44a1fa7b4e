"""Usage accounting: the model's reported tokens per user and UTC day, no content.

A turn adds its tokens in its own transcript transaction (`record`), so a transcript row and
its usage are stored or rolled back together. Functions take a connection and never commit.
The rows name their user: they are exported with the user's data (`for_subject`) and deleted
with it (`delete_for_subject`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, Protocol

import structlog
from sqlalchemy import Connection, Engine, Insert, delete, func, select

from app.concurrency import to_thread
from app.db.schema import usage_daily
from app.db.upsert import add_to_row, upsert

log = structlog.get_logger(__name__)


class CarriedRelease(Protocol):
    """A stream slot's release that rides in the usage transaction (app/operators/limits.py's
    `SlotRelease`): `run` in it, `committed` once it has committed. A protocol, so that the
    limits, which read the day's tokens here, are not imported back."""

    def run(self, connection: Connection) -> None: ...

    def committed(self) -> None: ...


@dataclass(frozen=True)
class TurnUsage:
    """What one turn cost its user, as the model reported it."""

    user_id: str
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class UsageRow:
    subject: str
    day: date
    turns: int
    prompt_tokens: int
    completion_tokens: int

    def view(self) -> dict[str, object]:
        return {
            "subject": self.subject,
            "day": self.day.isoformat(),
            "turns": self.turns,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


@dataclass(frozen=True)
class DayTotals:
    turns: int
    prompt_tokens: int
    completion_tokens: int
    users: int


def today() -> date:
    return datetime.now(UTC).date()


def record(connection: Connection, spent: TurnUsage, day: date | None = None) -> None:
    """Add one turn's tokens to its user's row for `day` (today, UTC)."""
    add_to_row(
        connection,
        usage_daily,
        {"user_id": spent.user_id, "day": day or today()},
        {
            "turns": 1,
            "prompt_tokens": max(0, spent.prompt_tokens),
            "completion_tokens": max(0, spent.completion_tokens),
        },
    )


_AMOUNTS = ("turns", "prompt_tokens", "completion_tokens")


def postgres_record() -> Insert:
    """`record`'s upsert on PostgreSQL, its values bound at execution (`record_values`): for a
    statement that carries it beside other writes (app/conversations/repository.py)."""
    statement = upsert("postgresql", usage_daily, ("user_id", "day"), _AMOUNTS, prefix="usage_")
    assert statement is not None
    return statement


def record_values(spent: TurnUsage, day: date | None = None) -> dict[str, Any]:
    """The values `postgres_record` binds: what `record` adds."""
    return {
        "usage_user_id": spent.user_id,
        "usage_day": day or today(),
        "usage_turns": 1,
        "usage_prompt_tokens": max(0, spent.prompt_tokens),
        "usage_completion_tokens": max(0, spent.completion_tokens),
    }


def tokens_on(connection: Connection, user_id: str, day: date) -> int:
    """Prompt and completion tokens the user spent on `day` (what the daily budget counts)."""
    total = connection.execute(
        select(usage_daily.c.prompt_tokens + usage_daily.c.completion_tokens).where(
            usage_daily.c.user_id == user_id, usage_daily.c.day == day
        )
    ).scalar()
    return int(total or 0)


_COLUMNS = (
    usage_daily.c.user_id,
    usage_daily.c.day,
    usage_daily.c.turns,
    usage_daily.c.prompt_tokens,
    usage_daily.c.completion_tokens,
)


def _row(values: tuple[object, ...]) -> UsageRow:
    user_id, day, turns, prompt, completion = values
    return UsageRow(str(user_id), day, int(turns), int(prompt), int(completion))  # type: ignore[arg-type, call-overload]


def for_subject(connection: Connection, subject: str) -> list[UsageRow]:
    """Every usage row of one user, oldest day first (for the export of the user's data)."""
    rows = connection.execute(
        select(*_COLUMNS).where(usage_daily.c.user_id == subject).order_by(usage_daily.c.day)
    ).all()
    return [_row(tuple(row)) for row in rows]


def delete_for_subject(connection: Connection, subject: str) -> int:
    """Delete every usage row of one user (erasure); returns how many there were."""
    result = connection.execute(delete(usage_daily).where(usage_daily.c.user_id == subject))
    return int(result.rowcount or 0)


def day_totals(connection: Connection, day: date, subject: str | None = None) -> DayTotals:
    """The day's totals over every user, or over one."""
    query = select(
        func.coalesce(func.sum(usage_daily.c.turns), 0),
        func.coalesce(func.sum(usage_daily.c.prompt_tokens), 0),
        func.coalesce(func.sum(usage_daily.c.completion_tokens), 0),
        func.count(),
    ).where(usage_daily.c.day == day)
    if subject is not None:
        query = query.where(usage_daily.c.user_id == subject)
    turns, prompt, completion, users = connection.execute(query).one()
    return DayTotals(int(turns), int(prompt), int(completion), int(users))


def day_users(
    connection: Connection, day: date, *, subject: str | None = None, limit: int = 50
) -> list[UsageRow]:
    """The day's rows, the heaviest users first (most tokens), at most `limit` of them."""
    spent = usage_daily.c.prompt_tokens + usage_daily.c.completion_tokens
    query = select(*_COLUMNS).where(usage_daily.c.day == day)
    if subject is not None:
        query = query.where(usage_daily.c.user_id == subject)
    rows = connection.execute(
        query.order_by(spent.desc(), usage_daily.c.user_id).limit(limit)
    ).all()
    return [_row(tuple(row)) for row in rows]


class UsageStore:
    """Records a turn's usage in a transaction of its own, for turns without a transcript row
    (the OpenAI-compatible route); best-effort like the transcript: a failure is logged."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _record(self, spent: TurnUsage, release: CarriedRelease | None) -> None:
        with self.engine.begin() as connection:
            record(connection, spent)
            if release is not None:
                release.run(connection)

    async def record(self, spent: TurnUsage, release: CarriedRelease | None = None) -> bool:
        """Record `spent` (and free the turn's stream slot with it, when `release` is given)."""
        try:
            await to_thread(self._record, spent, release)
        except Exception as error:
            log.warning("usage.record_failed", error_type=type(error).__name__)
            return False
        if release is not None:
            release.committed()
        return True
