"""What the MCP tools do for one authenticated caller: read memory, change it through the same
parsing, rules and write path as every other memory write, and search the caller's own
conversations. Each answer is a JSON object; a refusal carries the code the REST API uses.

The owner is always the verified token's subject (`Caller.user_id`), never an argument.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import structlog

from app.agent.search_tool import MAX_LIMIT, parse_search_arguments, result_payload
from app.agent.tools import ArgumentError, parse_arguments
from app.concurrency import CancelFlag
from app.db.deadline import within
from app.memory.parsing import parse_operations
from app.memory.projects import ProjectNotFoundError, Scope
from app.memory.provenance import Provenance
from app.memory.render import document
from app.memory.repository import CommitCancelledError
from app.memory.rules import SCHEMA_VERSION, MemoryValidationError
from app.memory.service import MemoryBusyError, MemoryUnavailableError
from app.runtime import Runtime
from app.telemetry import register_json_strings, register_sensitive, register_tool_arguments

log = structlog.get_logger(__name__)

DISABLED = "Memory is switched off for this account: nothing can be read or saved."
UNAVAILABLE = "Memory cannot be reached right now: nothing was read or saved."
BUSY = "Memory is busy with another change; nothing was changed. Retry shortly."


NO_PROJECT = "The project this connection names (X-Project-Id) no longer exists."


@dataclass(frozen=True)
class Caller:
    """The verified subject, the name the MCP client gave itself (a label, not identity) and
    the project the connection is scoped to (its `X-Project-Id` header, checked as the
    subject's; None outside projects)."""

    user_id: str
    client: str | None = None
    project_id: str | None = None

    @property
    def scope(self) -> Scope:
        """The model's scope (an MCP client's model, like a turn's): user and project, and the
        general document only in a project opted into it."""
        return Scope(self.project_id, owner=False)


@dataclass(frozen=True)
class Answer:
    """A tool's JSON answer; `error` answers are MCP tool errors (`isError`)."""

    body: dict[str, Any] = field(default_factory=dict)
    error: bool = False


def refused(code: str, message: str) -> Answer:
    return Answer({"error": {"code": code, "message": message}}, error=True)


async def _memory_off(runtime: Runtime) -> Answer | None:
    """The answer while memory is off (or its switch cannot be read: fail-closed), else None."""
    status = await runtime.flags.memory_status()
    if status == "enabled":
        return None
    if status == "unavailable":
        return refused("memory_unavailable", UNAVAILABLE)
    return refused("memory_disabled", DISABLED)


def _state(snapshot: Any, caller: Caller) -> dict[str, Any]:
    """As GET /v1/memory answers, with the documents of the connection's scope only: in a
    project, `user` and `project` (and `memory` when the project is opted into it)."""
    state: dict[str, Any] = {"status": "available", "schema_version": SCHEMA_VERSION}
    for target in ("user", "memory", "project"):
        if target in snapshot.targets:
            state[target] = document(snapshot, target)
    if caller.project_id is not None:
        state["scope"] = {
            "project_id": caller.project_id,
            "general_memory": "memory" in snapshot.targets,
        }
    return state


async def memory_view(runtime: Runtime, caller: Caller) -> Answer:
    off = await _memory_off(runtime)
    if off is not None:
        return off
    try:
        snapshot = await runtime.memory.read_async(caller.user_id, scope=caller.scope)
    except ProjectNotFoundError:
        return refused("project_not_found", NO_PROJECT)
    except MemoryUnavailableError:
        log.warning("mcp.view_failed")
        return refused("memory_unavailable", UNAVAILABLE)
    return Answer(_state(snapshot, caller))


async def memory_update(runtime: Runtime, caller: Caller, operations: object) -> Answer:
    """One call, one change: the batch is parsed and bounded as the chat tool's arguments are,
    then committed (or, under `save_mode: ask`, proposed) in its own unit of work."""
    raw = json.dumps({"operations": operations}, ensure_ascii=False)
    register_sensitive(raw)  # scrubbed from telemetry, accepted or not
    off = await _memory_off(runtime)
    if off is not None:
        return off
    arguments = parse_arguments(raw)
    if isinstance(arguments, ArgumentError):
        return refused(arguments.code, arguments.reason)
    register_json_strings(arguments)
    try:
        batch = parse_operations(arguments)
    except MemoryValidationError as error:
        return refused(error.code, error.message)
    provenance = Provenance("mcp", client=caller.client)
    try:
        result = await runtime.memory.commit_in_worker(
            caller.user_id,
            [batch],
            CancelFlag(),
            provenance=provenance,
            may_propose=True,
            scope=caller.scope,
        )
    except ProjectNotFoundError:
        return refused("project_not_found", NO_PROJECT)
    except MemoryValidationError as error:
        log.info("mcp.update_rejected", code=error.code, operation_count=len(batch))
        return refused(error.code, error.message)
    except CommitCancelledError:
        raise
    except MemoryBusyError:
        log.warning("mcp.update_failed", error="MemoryBusyError")
        return refused("memory_busy", BUSY)
    except Exception as error:
        log.warning("mcp.update_failed", error=type(error).__name__)
        return refused("memory_unavailable", UNAVAILABLE)
    usage = result.snapshot.usage().with_limits()
    log.info(
        "mcp.update",
        operation_count=len(batch),
        changed=len(result.changed),
        proposed=result.proposal_id is not None,
    )
    if result.proposal_id is not None:
        return Answer(
            {
                "status": "proposed",
                "proposal_id": result.proposal_id,
                "note": "The user asks to review changes first: nothing is saved until they "
                "accept this proposal.",
                **usage,
            }
        )
    return Answer(
        {
            "status": "committed" if result.changed else "unchanged",
            "change_id": result.change_id,
            **usage,
        }
    )


async def conversation_search(
    runtime: Runtime, caller: Caller, query: object, limit: object
) -> Answer:
    """The caller's earlier messages, bounded and labelled as untrusted, as the chat tool
    answers them (conversations are not memory: the flag does not switch them off)."""
    raw = json.dumps({"query": query, "limit": limit}, ensure_ascii=False)
    register_tool_arguments(raw)  # the query is user content
    parsed = parse_search_arguments(raw)
    if isinstance(parsed, ArgumentError):
        return refused(parsed.code, parsed.reason)
    words, count = parsed
    try:
        results = await within(
            runtime.settings.search_timeout_seconds,
            # The connection's project only; outside projects, conversations in no project
            # (as the chat tool searches).
            lambda: runtime.conversations.search(
                caller.user_id, words, min(count, MAX_LIMIT), project=caller.project_id
            ),
            what="conversation search",
        )
    except Exception as error:  # a timeout or any database failure
        log.warning("mcp.search_failed", error_type=type(error).__name__)
        return refused("search_unavailable", "Search is unavailable right now.")
    content, found = result_payload(results)
    log.info("mcp.search", result_count=found)
    body: dict[str, Any] = json.loads(content)
    return Answer(body)
