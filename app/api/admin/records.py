"""Operator routes over the service's records: model usage per day and user, and the audit log.
Neither carries memory or message content."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel

from app.api.deps import Operator, RuntimeDep
from app.api.errors import error_responses
from app.concurrency import to_thread
from app.db.schema import SUBJECT_CHARS
from app.errors import Unprocessable
from app.identity.tokens import subject_problem
from app.operators import audit, usage
from app.runtime import Runtime

router = APIRouter(prefix="/v1/admin", tags=["admin"])
MAX_ENTRY_ID = 2**31 - 1  # the audit log's INTEGER key: larger ids cannot exist


class UsageTotals(BaseModel):
    turns: int
    prompt_tokens: int
    completion_tokens: int
    users: int


class UserUsage(BaseModel):
    subject: str
    turns: int
    prompt_tokens: int
    completion_tokens: int


class UsageView(BaseModel):
    day: date
    subject: str | None
    total: UsageTotals
    users: list[UserUsage]  # the heaviest first (most tokens), at most `limit`


class AuditEntryView(BaseModel):
    id: str
    created_at: datetime
    actor: str
    action: str
    target: str
    before: Any
    after: Any


class AuditView(BaseModel):
    entries: list[AuditEntryView]
    next: str | None  # pass as `before` for the next (older) page


def _usage(runtime: Runtime, day: date, subject: str | None, limit: int) -> UsageView:
    with runtime.engine.connect() as connection:
        totals = usage.day_totals(connection, day, subject)
        rows = usage.day_users(connection, day, subject=subject, limit=limit)
    return UsageView(
        day=day,
        subject=subject,
        total=UsageTotals(
            turns=totals.turns,
            prompt_tokens=totals.prompt_tokens,
            completion_tokens=totals.completion_tokens,
            users=totals.users,
        ),
        users=[
            UserUsage(
                subject=row.subject,
                turns=row.turns,
                prompt_tokens=row.prompt_tokens,
                completion_tokens=row.completion_tokens,
            )
            for row in rows
        ],
    )


@router.get("/usage", response_model=UsageView, responses=error_responses(401, 403, 422, 503))
async def usage_of_day(
    _operator: Operator,
    runtime: RuntimeDep,
    day: Annotated[date, Query(description="The UTC day, YYYY-MM-DD")],
    subject: Annotated[str | None, Query(min_length=1, max_length=SUBJECT_CHARS)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> UsageView:
    """The model's reported tokens on one UTC day: the totals and the heaviest users (or one
    user, with `subject`)."""
    problem = None if subject is None else subject_problem(subject)
    if problem is not None:  # no token could carry it: no user has it (and NUL breaks PostgreSQL)
        raise Unprocessable(f"subject {problem}.")
    return await to_thread(_usage, runtime, day, subject, limit)


def read_audit(runtime: Runtime, limit: int, before: int | None) -> AuditView:
    with runtime.engine.connect() as connection:
        found = audit.entries(connection, limit=limit + 1, before=before)
    page = found[:limit]
    return AuditView(
        entries=[
            AuditEntryView(
                id=str(entry.id),
                created_at=entry.created_at,
                actor=entry.actor,
                action=entry.action,
                target=entry.target,
                before=entry.before,
                after=entry.after,
            )
            for entry in page
        ],
        next=str(page[-1].id) if len(found) > limit else None,
    )


@router.get("/audit", response_model=AuditView, responses=error_responses(401, 403, 422, 503))
async def audit_log(
    _operator: Operator,
    runtime: RuntimeDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before: Annotated[
        int | None, Query(ge=1, le=MAX_ENTRY_ID, description="An entry id: list older ones")
    ] = None,
) -> AuditView:
    """Operator actions, newest first (who, when, what, from, to)."""
    return await to_thread(read_audit, runtime, limit, before)
