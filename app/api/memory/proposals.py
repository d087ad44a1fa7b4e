"""Ask before saving: the caller's save mode and pending proposals, accepted through the memory
write path or rejected. Another user's proposal id answers 404 exactly like an unknown one."""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, StrictBool, model_validator

from app.api.deps import MemoryScope, RuntimeDep, SettingsDep
from app.api.errors import error_responses, unavailable_on_failure
from app.api.memory.commit import commit_change, is_issued_id
from app.api.memory.entries import MemoryState, memory_state, require_writes
from app.api.memory.failures import memory_unavailable
from app.api.memory.history import proposal_view
from app.api.project_scope import ProjectQuery
from app.errors import NotFound
from app.memory.provenance import Provenance, SaveMode
from app.settings import Settings

logger = structlog.get_logger(__name__)

router = APIRouter(prefix="/v1/memory", tags=["memory"])

NO_PROPOSAL = "No such proposal (it may have expired)."


class MemorySettings(BaseModel):
    """`save_mode` `auto`: the assistant saves as it goes; `ask`: it proposes, the user decides.
    `recall_chats`: each turn recalls the most relevant snippets of earlier conversations
    (docs/conversation-search.md); the operator's RECALL_CHATS_DEFAULT until the person
    chooses."""

    model_config = ConfigDict(extra="forbid")

    save_mode: SaveMode
    recall_chats: bool


class SettingsChange(BaseModel):
    """Either or both fields; one left out keeps its value."""

    model_config = ConfigDict(extra="forbid")

    save_mode: SaveMode | None = None
    recall_chats: StrictBool | None = None

    @model_validator(mode="after")
    def _something(self) -> SettingsChange:
        if self.save_mode is None and self.recall_chats is None:
            raise ValueError("send save_mode, recall_chats or both")
        return self


async def _settings(scope: MemoryScope, runtime: RuntimeDep, config: Settings) -> MemorySettings:
    mode, recall = await runtime.control.settings(scope.user_id)
    return MemorySettings(
        save_mode=mode, recall_chats=config.recall_chats_default if recall is None else recall
    )


# The settings are the person's, in every scope; a `project_id` is still checked as the
# caller's (404 otherwise), as on every memory route.
@router.get("/settings", response_model=MemorySettings, responses=error_responses(401, 404, 503))
async def read_settings(
    scope: MemoryScope, runtime: RuntimeDep, config: SettingsDep, _where: ProjectQuery
) -> MemorySettings:
    with unavailable_on_failure(logger, "memory.settings_failed", memory_unavailable):
        return await _settings(scope, runtime, config)


@router.put(
    "/settings",
    response_model=MemorySettings,
    responses=error_responses(401, 400, 404, 413, 422, 503),
)
async def write_settings(
    body: SettingsChange,
    scope: MemoryScope,
    runtime: RuntimeDep,
    config: SettingsDep,
    _where: ProjectQuery,
) -> MemorySettings:
    # A preference, not memory: it can be changed while the memory flag is off.
    with unavailable_on_failure(logger, "memory.settings_failed", memory_unavailable):
        if body.save_mode is not None:
            await runtime.memory.set_save_mode_async(scope.user_id, body.save_mode)
        if body.recall_chats is not None:
            await runtime.memory.set_recall_chats_async(scope.user_id, body.recall_chats)
        settings = await _settings(scope, runtime, config)
    logger.info("memory.settings_changed", save_mode=body.save_mode, recall_chats=body.recall_chats)
    return settings


@router.get(
    "/proposals",
    summary="Pending proposals of one scope, newest first",
    responses=error_responses(401, 404, 503),
)
async def read_proposals(
    scope: MemoryScope, runtime: RuntimeDep, where: ProjectQuery
) -> dict[str, Any]:
    with unavailable_on_failure(logger, "memory.proposals_failed", memory_unavailable):
        pending = await runtime.control.pending(scope.user_id, where.scope.project_id)
    return {"proposals": [proposal_view(proposal) for proposal in pending]}


@router.post(
    "/proposals/{proposal_id}/accept",
    response_model=MemoryState,
    response_model_exclude_none=True,
    summary="Apply a proposal like a staged batch",
    responses=error_responses(401, 404, 409, 422, 503),
)
async def accept_proposal(
    proposal_id: str,
    request: Request,
    scope: MemoryScope,
    runtime: RuntimeDep,
    where: ProjectQuery,
) -> MemoryState:
    require_writes(request, scope)
    if not is_issued_id(proposal_id):
        raise NotFound(NO_PROPOSAL)
    # The history entry keeps the proposal's turn and conversation (writes.resolve).
    result = await commit_change(
        runtime,
        scope.user_id,
        provenance=Provenance("proposal"),
        proposal_id=proposal_id,
        missing=NO_PROPOSAL,
        scope=where.scope,
    )
    return memory_state(result.snapshot, where=where)


@router.post(
    "/proposals/{proposal_id}/reject",
    status_code=204,
    response_class=Response,
    responses=error_responses(401, 404, 503),
)
async def reject_proposal(
    proposal_id: str, scope: MemoryScope, runtime: RuntimeDep, where: ProjectQuery
) -> Response:
    if not is_issued_id(proposal_id):
        raise NotFound(NO_PROPOSAL)
    with unavailable_on_failure(logger, "memory.proposals_failed", memory_unavailable):
        removed = await runtime.memory.reject_async(scope.user_id, proposal_id, where.scope)
    if not removed:
        raise NotFound(NO_PROPOSAL)
    logger.info("memory.proposal_rejected")
    return Response(status_code=204)
