"""Untrusted JSON (the model's tool arguments or a REST body) to memory operations: the shape is
checked field by field, unknown fields are refused, and no field can name the memory owner."""

from __future__ import annotations

from collections.abc import Mapping

from app.memory.rules import (
    ACTIONS,
    MAX_OPERATIONS,
    TARGETS,
    MemoryValidationError,
    Operation,
)

OPERATION_FIELDS = frozenset({"target", "action", "match", "content"})


def parse_operations(payload: object) -> list[Operation]:
    """Untrusted JSON (tool arguments or an API body) to operations; unknown fields are refused."""
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
    return [_parse_one(position, item) for position, item in enumerate(raw, start=1)]


def _parse_one(position: int, item: object) -> Operation:
    where = f"Operation {position}: "
    if not isinstance(item, Mapping):
        raise MemoryValidationError(where + "each operation must be an object.")
    unknown = sorted(set(item) - OPERATION_FIELDS)
    if unknown:
        raise MemoryValidationError(
            where + f"unknown field(s) {', '.join(map(repr, unknown))}; "
            "allowed: target, action, match, content."
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
    return Operation(target=target, action=action, match=match, content=content)
