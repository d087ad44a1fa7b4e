"""Remember-until, as pure data: reading an entry's `until`, and what expires at a moment.

An entry may carry an expiry beside it (`Snapshot.expiries`, never in the document). At its
time the entry leaves the document: `expire` says which entries those are and what the history
records for them (source `expired`). Nothing here touches storage or reads a clock: the caller
passes the moment.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from app.memory.rules import Change, MemoryValidationError, Snapshot

# How far ahead an expiry may be: a fact true "until" a date ten years away is a lasting one.
MAX_AHEAD = timedelta(days=3653)


def _invalid(message: str) -> MemoryValidationError:
    return MemoryValidationError(message, code="invalid_until")


def parse_until(value: object, now: datetime) -> datetime | None:
    """`until` as the moment the entry expires (naive UTC), or None for null (no expiry).

    A date (`2026-12-20`) means through that day, UTC: the entry expires when it ends. A
    date-time (`2026-12-20T18:00:00+01:00`) is that moment; without an offset it is UTC. It must
    lie in the future and at most ten years ahead. `now` is naive UTC."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _invalid("until must be an ISO 8601 date (2026-12-20) or date-time, or null.")
    text = value.strip()
    try:
        if len(text) == 10:
            moment = datetime.combine(date.fromisoformat(text) + timedelta(days=1), time())
        else:
            parsed = datetime.fromisoformat(text)
            if parsed.tzinfo is not None:
                parsed = parsed.astimezone(UTC).replace(tzinfo=None)
            moment = parsed
    except (ValueError, OverflowError):
        raise _invalid(
            f"until {text[:40]!r} is not an ISO 8601 date (2026-12-20) or date-time "
            "(2026-12-20T18:00:00Z)."
        ) from None
    if moment <= now:
        raise _invalid(
            f"until {text[:40]!r} is not in the future (now is {now:%Y-%m-%dT%H:%MZ}): "
            "give a later date, or no until for a lasting fact."
        )
    if moment > now + MAX_AHEAD:
        raise _invalid(
            f"until {text[:40]!r} is more than ten years ahead: leave until out for a lasting fact."
        )
    return moment


def expire(snapshot: Snapshot, now: datetime) -> tuple[Snapshot, tuple[Change, ...]]:
    """The snapshot without the entries whose expiry is at or before `now`, and one removal per
    entry that expired (its `until_before` says when). Nothing expired: the same snapshot."""
    due = sorted((target, entry, at) for target, entry, at in snapshot.expiries if at <= now)
    if not due:
        return snapshot, ()
    gone = {(target, entry) for target, entry, _ in due}

    def kept(target: str, entries: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(entry for entry in entries if (target, entry) not in gone)

    remaining = Snapshot(
        user=kept("user", snapshot.user),
        memory=kept("memory", snapshot.memory),
        project=kept("project", snapshot.project),
        targets=snapshot.targets,
        project_limit=snapshot.project_limit,
        expiries=frozenset(item for item in snapshot.expiries if item[2] > now),
    )
    changes = tuple(
        Change(target, "remove", entry, None, until_before=at)
        for target, entry, at in due
        if entry in snapshot.entries(target)
    )
    return remaining, changes


def visible(snapshot: Snapshot, now: datetime) -> Snapshot:
    """What a reader may see at `now`: never an expired entry (the prompt, GET /v1/memory)."""
    return expire(snapshot, now)[0]
