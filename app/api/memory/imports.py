"""Import from other assistants: pasted text becomes a proposal the caller reviews, never a
direct write (app/memory/importing.py plans it; MemoryService.propose stores it under the
user's writer lock). Accepting it is `POST /v1/memory/proposals/{id}/accept`."""

from __future__ import annotations

from typing import Any, Literal

import structlog
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.api.deps import MemoryScope, RuntimeDep
from app.api.errors import error_responses
from app.api.memory.entries import require_writes
from app.api.memory.failures import memory_unavailable
from app.api.memory.history import proposal_view
from app.api.project_scope import NO_PROJECT, ProjectQuery
from app.cpu import in_process
from app.errors import Conflict, NotFound, ServiceUnavailable
from app.memory.importing import MAX_IMPORT_CHARS, plan
from app.memory.projects import ProjectNotFoundError
from app.memory.rules import MemoryValidationError
from app.memory.service import MemoryBusyError, MemoryUnavailableError
from app.operators.limits import Caller, Limits
from app.telemetry import register_sensitive

logger = structlog.get_logger(__name__)

router = APIRouter(prefix="/v1/memory", tags=["memory"])


class ImportBody(BaseModel):
    """What another assistant printed when asked what it remembers, or one fact per line."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=MAX_IMPORT_CHARS)

    @field_validator("text")
    @classmethod
    def _storable(cls, text: str) -> str:
        # Refused whole, as a chat message is: not a line quietly dropped as `invalid`.
        if "\x00" in text:
            raise ValueError("must not contain the NUL character (U+0000)")
        return text


class DroppedLine(BaseModel):
    text: str  # the line as pasted (at most 200 characters)
    reason: Literal[
        "secret", "instruction_like", "duplicate", "too_long", "over_capacity", "invalid"
    ]


class ImportResult(BaseModel):
    """The proposal (as GET /v1/memory/proposals lists it; null when nothing new is left) and
    the lines left out, with the reason."""

    proposal: dict[str, Any] | None
    dropped: list[DroppedLine]


@router.post(
    "/import",
    response_model=ImportResult,
    summary="Propose the facts of a pasted export; report what was dropped and why",
    responses=error_responses(401, 400, 404, 409, 413, 422, 429, 503),
)
async def import_memory(
    body: ImportBody,
    request: Request,
    scope: MemoryScope,
    runtime: RuntimeDep,
    where: ProjectQuery,
) -> dict[str, Any]:
    """With ?project_id=, project and environment facts are proposed for the project's document
    instead of the general one, and the proposal is the project's. Imports count against the
    person's USER_IMPORTS_PER_MINUTE (429 with Retry-After beyond it); the plan runs in the
    CPU worker process (app/cpu.py)."""
    require_writes(request, scope)
    register_sensitive(body.text)  # scrubbed from this request's telemetry
    limits = Limits(turns_per_minute=runtime.settings.user_imports_per_minute)
    await runtime.limits.admit(Caller.importer(scope.user_id), limits)
    try:
        snapshot = await runtime.memory.read_async(scope.user_id, scope=where.scope)
    except ProjectNotFoundError:
        raise NotFound(NO_PROJECT) from None
    except MemoryUnavailableError:
        logger.warning("memory.import_failed", error="MemoryUnavailableError")
        raise memory_unavailable() from None
    result = await in_process(plan, body.text, snapshot)
    dropped = [{"text": item.text, "reason": item.reason} for item in result.dropped]
    if not result.entries:
        logger.info("memory.import_planned", entries=0, dropped=len(dropped))
        return {"proposal": None, "dropped": dropped}
    try:
        proposed = await runtime.memory.propose_async(
            scope.user_id, result.batches(), "import", where.scope
        )
        project_id = where.scope.project_id
        pending = (
            await runtime.control.pending(scope.user_id, project_id) if proposed.proposal_id else []
        )
    except ProjectNotFoundError:
        raise NotFound(NO_PROJECT) from None
    except MemoryValidationError as error:
        # Memory changed between the read and the proposal (another writer filled a store).
        raise Conflict(
            "Memory changed while the import was prepared; nothing was proposed. Try again.",
            code=error.code,
        ) from None
    except MemoryBusyError:
        raise ServiceUnavailable(
            "Memory is busy with another change; nothing was proposed. Retry shortly.",
            code="memory_busy",
        ) from None
    except Exception as error:
        logger.warning("memory.import_failed", error=type(error).__name__)
        raise memory_unavailable() from None
    proposal = next((p for p in pending if p.id == proposed.proposal_id), None)
    logger.info(
        "memory.import_proposed",
        entries=len(result.entries),
        dropped=len(dropped),
        proposed=proposal is not None,
    )
    return {"proposal": proposal_view(proposal) if proposal else None, "dropped": dropped}
