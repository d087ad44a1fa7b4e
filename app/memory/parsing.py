"""Untrusted JSON (the model's tool arguments or a REST body) to memory operations: the shape is
checked field by field, unknown fields are refused, and no field can name the memory owner."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from app.memory.rules import (
    ACTIONS,
    MAX_OPERATIONS,
    TARGETS,
    MemoryValidationError,
    Operation,
)
from app.memory.until import parse_until

OPERATION_FIELDS = frozenset({"target", "action", "match", "content", "until"})


def parse_operations(payload: object, now: datetime | None = None) -> list[Operation]:
    """Untrusted JSON (tool arguments or an API body) to operations; unknown fields are refused.
    `until` is read against `now` (naive UTC; the current time when None): it must lie ahead."""
    now = now or datetime.now(UTC).replace(tzinfo=None)
    if not isinstance(payload, Mapping):
        raise MemoryValidationError("Arguments must be an object with an 'operations' array.")
    unknown = sorted(set(payload) - {"operations"})
    if unknown:
        raise MemoryValidationError(
            f"Unknown argument(s) {', '.join(map(repr, unknown))}: only 'operations' is accepted. "
            "The memory owner is never an argument."
        )
    raw = payload.get("operations")
    if not isinstance(raw, list):
        raise MemoryValidationError("'operations' must be an array of 1 to 20 operations.")
    if not 1 <= len(raw) <= MAX_OPERATIONS:
        raise MemoryValidationError(
            f"'operations' holds {len(raw)} items; send 1 to {MAX_OPERATIONS}."
        )
    return [_parse_one(position, item, now) for position, item in enumerate(raw, start=1)]


def _parse_one(position: int, item: object, now: datetime) -> Operation:
    where = f"Operation {position}: "
    if not isinstance(item, Mapping):
        raise MemoryValidationError(where + "each operation must be an object.")
    unknown = sorted(set(item) - OPERATION_FIELDS)
    if unknown:
        raise MemoryValidationError(
            where + f"unknown field(s) {', '.join(map(repr, unknown))}; "
            "allowed: target, action, match, content, until."
        )
    target, action = item.get("target"), item.get("action")
    if target not in TARGETS:
        raise MemoryValidationError(where + f"target must be 'user' or 'memory', not {target!r}.")
    if action not in ACTIONS:
        raise MemoryValidationError(
            where + f"action must be 'add', 'replace' or 'remove', not {action!r}."
        )
    match, content = item.get("match"), item.get("content")
    for name, value in (("match", match), ("content", content)):
        if value is not None and not isinstance(value, str):
            raise MemoryValidationError(where + f"{name} must be a string or null.")
    sets_until = "until" in item
    if sets_until and action == "remove":
        raise MemoryValidationError(where + "remove forbids until: it removes the entry.")
    try:
        until = parse_until(item.get("until"), now)
    except MemoryValidationError as error:
        raise MemoryValidationError(where + error.message, code=error.code) from None
    return Operation(
        target=target,
        action=action,
        match=match,
        content=content,
        until=until,
        sets_until=sets_until,
    )
