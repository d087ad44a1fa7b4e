"""The memory API: what the user sees and controls, through the same rules and commit as the tool.

Every route takes its owner from the request's memory scope (the verified token's subject);
no body, query or path parameter names a user.
"""

from __future__ import annotations

from typing import Any, Literal

import structlog
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel

from app.api.bodies import json_object
from app.api.deps import MemoryScope, RuntimeDep
from app.api.errors import BODY_ERRORS, ErrorBody, error_responses
from app.api.memory.failures import commit_failures, memory_unavailable
from app.api.project_scope import NO_PROJECT, ProjectQuery, RouteScope
from app.concurrency import CancelFlag
from app.errors import Conflict, NotFound, ServiceUnavailable, Unprocessable
from app.memory.contract import operations_schema
from app.memory.parsing import parse_operations
from app.memory.projects import ProjectNotFoundError
from app.memory.provenance import Provenance, Source
from app.memory.render import document
from app.memory.rules import (
    SCHEMA_VERSION,
    TARGETS,
    MemoryValidationError,
    Snapshot,
)
from app.memory.scope import MemoryRequest
from app.memory.service import MemoryUnavailableError

logger = structlog.get_logger(__name__)

router = APIRouter(prefix="/v1/memory", tags=["memory"])

# The sources a person's own batch may name (POST /v1/memory/operations, `source`).
EDIT_SOURCES: dict[str, Source] = {"api": "api", "sources": "sources"}


# -- documented shapes (a body is validated by `parse_operations`, as the tool's is) ----------


class ExpiringEntry(BaseModel):
    """An entry that leaves memory at `expires_at` (ISO 8601, UTC): remember-until."""

    text: str
    expires_at: str


class MemoryDocument(BaseModel):
    entries: list[str]
    characters: int
    limit: int
    # Only when some entry of the store expires (absent otherwise).
    expiring: list[ExpiringEntry] | None = None


class ScopeView(BaseModel):
    """Where the documents apply: `project_id` null outside projects; `general_memory`: whether
    the project's conversations also see the general `memory` document (null outside)."""

    project_id: str | None
    general_memory: bool | None


class MemoryState(BaseModel):
    # "disabled": the feature flag is off; entries stay readable and deletable, not editable.
    status: Literal["available", "disabled"]
    schema_version: int
    user: MemoryDocument
    memory: MemoryDocument
    # With ?project_id= only: the project's document and the scope (absent outside projects).
    project: MemoryDocument | None = None
    scope: ScopeView | None = None


_OPERATIONS_REQUEST = {
    "requestBody": {
        "required": True,
        # `project` is reachable only with ?project_id= (a 422 otherwise).
        "content": {"application/json": {"schema": operations_schema(TARGETS)}},
    }
}
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Missing or invalid bearer token"},
    503: {
        "model": ErrorBody,
        "description": "Memory cannot be reached in time (memory_unavailable), or a change "
        "waited too long for another one (memory_busy)",
    },
}


def memory_state(
    snapshot: Snapshot, *, enabled: bool = True, where: RouteScope | None = None
) -> MemoryState:
    state: dict[str, object] = {
        "status": "available" if enabled else "disabled",
        "schema_version": SCHEMA_VERSION,
        "user": document(snapshot, "user"),
        "memory": document(snapshot, "memory"),
    }
    if where is not None and where.project is not None:
        state["project"] = document(snapshot, "project")
        state["scope"] = where.view()
    return MemoryState.model_validate(state)


def require_writes(request: Request, scope: MemoryRequest) -> None:
    """Memory changes (operations, undo, accepting a proposal) need the flag on."""
    if not scope.writes_enabled:
        if getattr(request.state, "memory_flag", None) == "unavailable":
            # Fail-closed: the flag could not be read, so writes stay off; that is an outage.
            raise ServiceUnavailable(
                "The memory switch cannot be read right now; nothing was changed.",
                code="memory_unavailable",
            )
        raise Conflict("Memory writes are switched off.", code="memory_disabled")


def _provenance(payload: dict[str, Any]) -> Provenance:
    """The body's optional `source`: "api" (the default) or "sources", an entry the person
    marked "Wrong" under an answer's sources (history says so). Taken out of the body, whose
    rest is the tool's schema. The person's own change either way: it is never proposed."""
    source = payload.pop("source", "api")
    if not isinstance(source, str) or source not in EDIT_SOURCES:
        raise Unprocessable('\'source\' must be "api" or "sources".', code="invalid_source")
    return Provenance(EDIT_SOURCES[source])


# -- routes ---------------------------------------------------------------------------------


@router.get(
    "",
    response_model=MemoryState,
    response_model_exclude_none=True,
    responses={**_ERRORS, 404: {"model": ErrorBody, "description": "No such project"}},
)
async def read_memory(scope: MemoryScope, runtime: RuntimeDep, where: ProjectQuery) -> MemoryState:
    # Bounded by MEMORY_READ_TIMEOUT_SECONDS: a database that hangs is a 503, not a hung request.
    try:
        snapshot = await runtime.memory.read_async(scope.user_id, scope=where.scope)
    except ProjectNotFoundError:
        raise NotFound(NO_PROJECT) from None
    except MemoryUnavailableError:
        logger.warning("memory.read_failed", route="api")
        raise memory_unavailable() from None
    return memory_state(snapshot, enabled=scope.writes_enabled, where=where)


@router.post(
    "/operations",
    response_model=MemoryState,
    response_model_exclude_none=True,
    openapi_extra=_OPERATIONS_REQUEST,
    responses={
        **_ERRORS,
        **error_responses(*BODY_ERRORS),
        404: {"model": ErrorBody, "description": "No such project"},
        409: {"model": ErrorBody, "description": "The memory feature is off (memory_disabled)"},
        422: {"model": ErrorBody, "description": "The batch breaks a rule; nothing changed"},
    },
)
async def apply_memory_operations(
    request: Request, scope: MemoryScope, runtime: RuntimeDep, where: ProjectQuery
) -> MemoryState:
    require_writes(request, scope)
    payload = json_object(await request.body())
    provenance = _provenance(payload)
    try:
        operations = parse_operations(payload)
    except MemoryValidationError as error:
        raise Unprocessable(error.message, code=error.code) from None

    cancel = CancelFlag()
    with commit_failures(
        logger,
        rejected="memory.api_rejected",
        failed="memory.api_commit_failed",
        operation_count=len(operations),
    ):
        result = await runtime.memory.commit_in_worker(
            scope.user_id, [operations], cancel, scope=where.scope, provenance=provenance
        )
    logger.info(
        "memory.api_committed",
        operation_count=len(operations),
        changed=len(result.changed),
        retry_count=result.retry_count,
        duration_ms=round(result.duration_ms, 1),
    )
    return memory_state(result.snapshot, where=where)


@router.delete(
    "",
    status_code=204,
    response_class=Response,
    responses={**_ERRORS, 404: {"model": ErrorBody, "description": "No such project"}},
)
async def forget_memory(scope: MemoryScope, runtime: RuntimeDep, where: ProjectQuery) -> Response:
    """Everything remembered (every project's document too), or with ?project_id= that
    project's document, history and proposals only (the project stays)."""
    try:
        if where.project is not None:
            removed = await runtime.memory.forget_project_async(scope.user_id, where.project.id)
        else:
            removed = await runtime.memory.forget_async(scope.user_id)
    except ProjectNotFoundError:
        raise NotFound(NO_PROJECT) from None
    except Exception as error:
        logger.warning("memory.forget_failed", error=type(error).__name__)
        raise memory_unavailable() from None
    logger.info("memory.forgotten", rows=removed)
    return Response(status_code=204)
