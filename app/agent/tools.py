"""The `memory_update` tool: validates a proposed batch against the request's ledger, never the
database, and answers the model with a short JSON result that never echoes entries."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import structlog
from opentelemetry import trace

from app.agent.context import MAX_REJECTED_CALLS, TurnContext
from app.agent.events import SEARCH_TOOL_NAME, ToolOutcome
from app.cpu import off_loop
from app.memory.contract import MEMORY_TOOL_NAME, operations_schema
from app.memory.ledger import stage_operations
from app.memory.parsing import parse_operations
from app.memory.rules import GENERAL_TARGETS, MemoryValidationError, Target
from app.telemetry import (
    capture_content,
    count_targets,
    memory_event,
    register_json_strings,
    register_sensitive,
    start_span,
)

log = structlog.get_logger(__name__)
tracer = trace.get_tracer(__name__)

UNAVAILABLE_MESSAGE = "memory unavailable: nothing was saved"
# Bounds on the raw arguments, checked before any JSON parsing. The largest honest batch (20
# operations rewriting both stores, every character escaped as \uXXXX) stays well below the
# size; the contract's deepest value (object, array, operation, field) is 3 levels deep.
MAX_ARGUMENT_CHARS = 64 * 1024
MAX_ARGUMENT_DEPTH = 8
# What the memory tool's arguments look like, for the model when it sent something else.
OPERATIONS_SHAPE = (
    "one JSON object with an 'operations' array of objects (target, action, match, content) "
    "with plain string values"
)

# The design's contract (docs/design.md), from the REST API's operation model; the owner is never a
# parameter.
MEMORY_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": MEMORY_TOOL_NAME,
        "description": (
            "Propose edits to the user's persistent memory (USER PROFILE = target 'user', "
            "AGENT MEMORY = target 'memory'). Edits are saved only if this turn completes. "
            "add needs content; replace needs match (a unique substring) and the complete new "
            "entry; remove needs match. The batch is ordered; capacity is checked after it."
        ),
        "parameters": operations_schema(),
    },
}


_HEADINGS = {
    "user": "USER PROFILE = target 'user'",
    "memory": "AGENT MEMORY = target 'memory'",
    "project": "PROJECT MEMORY = target 'project', this project's only",
}


def memory_tool(targets: tuple[Target, ...]) -> dict[str, Any]:
    """The tool as offered in a scope: its `target` enum is exactly the scope's targets (there
    is no argument that names a project: the turn's conversation decides it)."""
    if targets == GENERAL_TARGETS:
        return MEMORY_TOOL
    stores = ", ".join(_HEADINGS[target] for target in targets)
    return {
        "type": "function",
        "function": {
            "name": MEMORY_TOOL_NAME,
            "description": (
                f"Propose edits to the user's persistent memory ({stores}). Edits are saved "
                "only if this turn completes. add needs content; replace needs match (a unique "
                "substring) and the complete new entry; remove needs match. The batch is "
                "ordered; capacity is checked after it."
            ),
            "parameters": operations_schema(targets),
        },
    }


@dataclass(frozen=True)
class ToolResult:
    """What the rounds need from one call: the event outcome, the message for the model, and
    whether the call's arguments may be repeated to the model in the next request (not when
    they were refused for their size or shape: the conversation stays bounded)."""

    outcome: ToolOutcome
    operation_count: int
    content: str
    echo_arguments: bool = True


def _count(arguments: object) -> int:
    if isinstance(arguments, dict) and isinstance(arguments.get("operations"), list):
        return len(arguments["operations"])
    return 0


@dataclass(frozen=True)
class ArgumentError:
    """Why the raw arguments were not parsed: a stable code and a reason the model can act on."""

    code: str
    reason: str


def nesting_depth(text: str, limit: int) -> int:
    """The bracket depth of JSON text (brackets inside strings ignored), counted only up to
    `limit + 1`: a linear scan, so hostile nesting never reaches the recursive parser."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif char in "]}":
            depth -= 1
    return deepest


def parse_arguments(
    raw_arguments: str, *, oversized: bool = False, shape: str = OPERATIONS_SHAPE
) -> object | ArgumentError:
    """The model's raw arguments as JSON, within bounds on size and depth. `oversized`: the
    stream reader already dropped them past LLM_MAX_TOOL_ARGUMENT_CHARS. `shape` is what the
    tool expects, named in the reasons given to the model."""
    text = raw_arguments or "{}"
    if oversized:
        return ArgumentError(
            "arguments_too_large",
            "The arguments are longer than this service accepts (LLM_MAX_TOOL_ARGUMENT_CHARS). "
            "Send fewer or shorter values.",
        )
    if len(text) > MAX_ARGUMENT_CHARS:
        return ArgumentError(
            "arguments_too_large",
            f"The arguments hold {len(text):,} characters; at most {MAX_ARGUMENT_CHARS:,} are "
            "accepted. Send fewer or shorter operations.",
        )
    if nesting_depth(text, MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH:
        return ArgumentError(
            "arguments_too_deep",
            f"The arguments are nested more than {MAX_ARGUMENT_DEPTH} levels deep. Send {shape}.",
        )
    try:
        value: object = json.loads(text)
    except (ValueError, RecursionError):
        return ArgumentError(
            "invalid_arguments",
            f"The arguments are not valid JSON. Send {shape}.",
        )
    return value


async def run_memory_tool(
    ctx: TurnContext, raw_arguments: str, *, oversized: bool = False
) -> ToolResult:
    """Stage one batch on the turn's ledger, or explain to the model why not (`oversized`: the
    arguments were too long to keep, see `parse_arguments`). The batch's content policy runs
    off the event loop: up to 20 entries of 2,200 characters, tens of milliseconds each."""
    register_sensitive(raw_arguments)  # scrubbed from telemetry, accepted or not
    with start_span(tracer, "memory.tool") as span:
        capture_content(span, "app.capture.memory_operations", raw_arguments)
        started = time.perf_counter()
        result, targets = await _run(ctx, raw_arguments, oversized)
        staged = ctx.ledger.snapshot if ctx.ledger else ctx.baseline
        memory_event(
            stage="tool",
            outcome=result.outcome,
            operation_count=result.operation_count,
            targets=targets,
            usage=staged.usage(),
            duration_ms=(time.perf_counter() - started) * 1000,
            rejected_calls=ctx.rejected_calls,
        )
        return result


def _rejected(
    ctx: TurnContext, count: int, code: str, reason: str, *, echo: bool = True
) -> ToolResult:
    ctx.rejected_calls += 1
    payload: dict[str, Any] = {"status": "rejected", "code": code, "reason": reason}
    payload.update((ctx.ledger.snapshot if ctx.ledger else ctx.baseline).usage().with_limits())
    if ctx.rejection_limit_reached:
        payload["instruction"] = (
            f"{MAX_REJECTED_CALLS} memory edits were rejected in this turn. Stop calling "
            f"{MEMORY_TOOL_NAME} and answer the user now."
        )
    return ToolResult("rejected", count, json.dumps(payload), echo_arguments=echo)


async def _run(
    ctx: TurnContext, raw_arguments: str, oversized: bool
) -> tuple[ToolResult, dict[str, int]]:
    arguments = parse_arguments(raw_arguments, oversized=oversized)
    if not isinstance(arguments, ArgumentError):
        register_json_strings(arguments)
    count = _count(arguments)
    bad_arguments = isinstance(arguments, ArgumentError)
    if ctx.ledger is None:
        # The owner comes from the turn's context alone, and only a turn that read memory with
        # the flag on has a ledger: nothing in the arguments can change either.
        payload: dict[str, Any] = {"status": "unavailable", "message": UNAVAILABLE_MESSAGE}
        return ToolResult(
            "unavailable", count, json.dumps(payload), echo_arguments=not bad_arguments
        ), {}
    if ctx.rejection_limit_reached:
        return _rejected(
            ctx,
            count,
            "too_many_rejections",
            "Too many rejected memory edits in this turn.",
            echo=not bad_arguments,
        ), {}
    if isinstance(arguments, ArgumentError):
        return _rejected(ctx, 0, arguments.code, arguments.reason, echo=False), {}
    try:
        operations = parse_operations(arguments)
        # Pure (the ledger and the policy); nothing else of the turn runs while it does.
        snapshot = await off_loop(stage_operations, ctx.ledger, operations)
    except MemoryValidationError as error:
        return _rejected(ctx, count, error.code, error.message), {}
    targets = count_targets(operations)
    staged: dict[str, Any] = {
        "status": "staged",
        "operations": len(operations),
        **_save_note(ctx),
        **snapshot.usage().with_limits(),
    }
    return ToolResult("staged", len(operations), json.dumps(staged)), targets


# What the staged result tells the model about the batch's fate, by the person's save mode: with
# "ask" nothing is saved by the turn, and a model told "saved" would say so (issue 34).
SAVE_NOTES: dict[str, dict[str, str]] = {
    "auto": {"save_mode": "auto", "note": "Saved when this turn completes successfully."},
    "ask": {
        "save_mode": "ask",
        "note": (
            "Not saved yet: the user reviews memory changes first (Ask before saving). When "
            "this turn completes the change awaits their approval. Tell them you will ask "
            "before saving it; do not say it is saved."
        ),
    },
    "unknown": {
        "save_mode": "unknown",
        "note": (
            "Saved when this turn completes, unless the user chose to review changes first; "
            "then it awaits their approval. Do not promise it is saved."
        ),
    },
}


def _save_note(ctx: TurnContext) -> dict[str, str]:
    return SAVE_NOTES[ctx.save_mode or "unknown"]


def unknown_tool_result(name: str) -> str:
    """The answer to a call of a tool that this turn does not offer."""
    known = name in (MEMORY_TOOL_NAME, SEARCH_TOOL_NAME)
    reason = (
        f"{name} is not available in this conversation."
        if known
        else ("No such tool is available.")
    )
    return json.dumps({"status": "rejected", "code": "tool_not_offered", "reason": reason})
