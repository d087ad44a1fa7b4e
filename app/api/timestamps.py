"""How the API writes a moment: ISO 8601 in UTC with its zone, `2026-12-01T07:43:00.903074Z`."""

from __future__ import annotations

from datetime import UTC, datetime


def iso_utc(moment: datetime) -> str:
    """Stored timestamps are UTC without a zone (not every database keeps one); say so."""
    aware = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return aware.isoformat(timespec="microseconds").replace("+00:00", "Z")
