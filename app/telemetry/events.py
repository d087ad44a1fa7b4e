"""Typed telemetry helpers: the memory event of the design (docs/design.md), turn/subject binding.

The memory event carries that operational metadata and nothing else, to the log and to
the current span alike, so that an operator sees the same facts in both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal, Protocol

import structlog
from opentelemetry import trace

from app.names import MEMORY_TOOL_NAME
from app.telemetry import metrics
from app.telemetry.subjects import subject_hash

log = structlog.get_logger(__name__)

MEMORY_TOOL_EVENT = "memory.tool"
MEMORY_COMMIT_EVENT = "memory.commit"
MemoryStage = Literal["tool", "commit"]
_CODE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,63}$")

# Outcomes are enums: anything else is reported as "other", so that a free-text value can never
# ride along in an allow-listed field.
MEMORY_OUTCOMES: frozenset[str] = frozenset(
    {
        "staged",
        "rejected",
        "unavailable",
        "disabled",
        "committed",
        "proposed",
        "none",
        "failed",
        "cancelled",
    }
)


class _Targeted(Protocol):
    @property
    def target(self) -> str: ...


class _Usage(Protocol):
    """The character counts of the stores (app/memory/rules.py's `MemoryUsage`)."""

    @property
    def user(self) -> int: ...

    @property
    def memory(self) -> int: ...

    @property
    def project(self) -> int | None: ...


def count_targets(operations: Iterable[_Targeted]) -> dict[str, int]:
    counts = {"user": 0, "memory": 0}  # outside projects, the shape it always had
    for operation in operations:
        if operation.target in ("user", "memory", "project"):
            counts[operation.target] = counts.get(operation.target, 0) + 1
    return counts


def memory_event(
    *,
    stage: MemoryStage,
    operation_count: int,
    targets: Mapping[Any, int],
    usage: _Usage,
    duration_ms: float,
    outcome: str,
    retry_count: int = 0,
    tool: str = MEMORY_TOOL_NAME,
    reason: str | None = None,
    **counts: int,
) -> None:
    """Log the memory event of docs/design.md (after each `memory_update` call and commit) and put
    the same metadata on the current span. `reason` is an error code or exception class name;
    extra keyword fields must be counts (integers)."""
    outcome = outcome if outcome in MEMORY_OUTCOMES else "other"
    extra = {name: int(value) for name, value in counts.items()}
    user_targets = int(targets.get("user", 0))
    memory_targets = int(targets.get("memory", 0))
    project_targets = int(targets.get("project", 0))
    fields: dict[str, Any] = {
        "tool": tool,
        "operation_count": int(operation_count),
        "targets": {"user": user_targets, "memory": memory_targets},
        "user_characters": usage.user,
        "memory_characters": usage.memory,
        # In a project only (counts, never its id or content).
        **({"project_characters": usage.project} if usage.project is not None else {}),
        "duration_ms": round(float(duration_ms), 1),
        "retry_count": int(retry_count),
        "outcome": outcome,
        **extra,
    }
    if project_targets or usage.project is not None:
        fields["targets"]["project"] = project_targets
    if reason is not None:
        fields["reason"] = reason if _CODE.match(reason) else "other"
    name = MEMORY_TOOL_EVENT if stage == "tool" else MEMORY_COMMIT_EVENT
    if stage == "commit":
        metrics.memory_commit(outcome, fields.get("reason"), float(duration_ms) / 1000)
    if outcome == "failed":
        log.warning(name, **fields)
    else:
        log.info(name, **fields)
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(
            {
                "memory.stage": stage,
                "memory.tool": tool,
                "memory.operation_count": fields["operation_count"],
                "memory.targets.user": user_targets,
                "memory.targets.memory": memory_targets,
                "memory.user_characters": fields["user_characters"],
                "memory.memory_characters": fields["memory_characters"],
                "memory.duration_ms": fields["duration_ms"],
                "memory.retry_count": fields["retry_count"],
                "memory.outcome": outcome,
                **{f"memory.{key}": value for key, value in extra.items()},
            }
        )


def turn_finished(
    *,
    turn_id: str,
    agent: str,
    outcome: str,
    rounds: int,
    duration_seconds: float,
    conversation_id: str | None = None,
    memory_status: str | None = None,
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
) -> None:
    """The end of every turn: its line, which sums the turn up (a reader of one line per turn
    needs no other), and the turn metrics. `outcome` is the finish reason, `cancelled`, or the
    error code; the conversation and the memory status are absent when the turn never opened."""
    opened = {"conversation_id": conversation_id, "memory_status": memory_status}
    tokens = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    log.info(
        "turn.finished",
        turn_id=turn_id,
        agent=agent,
        outcome=outcome,
        rounds=rounds,
        duration_ms=round(duration_seconds * 1000, 1),
        **{key: value for key, value in (opened | tokens).items() if value is not None},
    )
    metrics.turn_finished(agent, outcome, duration_seconds)
    if prompt_tokens is not None and completion_tokens is not None:
        metrics.model_tokens(prompt_tokens, completion_tokens)


def memory_read_failed(*, turn_id: str, error_type: str, source: Literal["flag", "memory"]) -> None:
    """A turn answers without memory: the flag or memory could not be read (fail-open)."""
    log.warning("memory.read_failed", turn_id=turn_id, error_type=error_type)
    metrics.memory_read_failed(source)


def bind_subject(subject: str) -> None:
    """Put the caller's subject on every following log line of this context, as a hash only."""
    structlog.contextvars.bind_contextvars(subject_hash=subject_hash(subject))


@contextmanager
def turn_context(turn_id: str, subject: str | None = None) -> Iterator[None]:
    """Bind the turn id (and the hashed subject) to the log lines and the span of a turn."""
    bound: dict[str, str] = {"turn_id": turn_id}
    if subject is not None:
        bound["subject_hash"] = subject_hash(subject)
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attribute("app.turn_id", turn_id)
        if subject is not None:
            span.set_attribute("app.subject_hash", bound["subject_hash"])
    tokens = structlog.contextvars.bind_contextvars(**bound)  # reset as `RequestIdMiddleware`'s
    try:
        yield
    finally:
        structlog.contextvars.reset_contextvars(**tokens)
