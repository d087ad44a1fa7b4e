"""The caller's projects: list, create, rename or opt into general memory, delete. A project is
private to its owner: another person's project id answers 404 on every route."""

from __future__ import annotations

from typing import Any, Literal

import structlog
from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict
from starlette.responses import Response

from app.api.deps import CurrentUser, RuntimeDep
from app.api.errors import error_responses
from app.api.project_scope import NO_PROJECT, project_write_unavailable
from app.api.timestamps import iso_utc
from app.concurrency import to_thread
from app.conversations.service import is_conversation_id
from app.errors import Conflict, NotFound, Unprocessable
from app.memory.projects import (
    Project,
    ProjectLimitError,
    ProjectNameError,
    ProjectNotEmptyError,
    ProjectNotFoundError,
    normalize_name,
)

logger = structlog.get_logger(__name__)

router = APIRouter(prefix="/v1/projects", tags=["projects"])


def project_view(project: Project) -> dict[str, Any]:
    return {
        "id": project.id,
        "name": project.name,
        "general_memory": project.general_memory,
        "conversation_count": project.conversation_count,
        "created_at": iso_utc(project.created_at),
        "updated_at": iso_utc(project.updated_at),
    }


class NewProject(BaseModel):
    """`{"name": "...", "general_memory": false}`; any other field is refused."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str
    general_memory: bool = False


class ProjectChange(BaseModel):
    """A new name, the general-memory opt-in, or both."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str | None = None
    general_memory: bool | None = None


def _name(raw: str) -> str:
    try:
        return normalize_name(raw)
    except ProjectNameError as error:
        raise Unprocessable(f"The project's {error}.", code="invalid_name") from None


@router.get("", summary="The caller's projects, oldest first", responses=error_responses(401, 503))
async def list_projects(user: CurrentUser, runtime: RuntimeDep) -> dict[str, Any]:
    try:
        found = await to_thread(runtime.memory.list_projects, user.subject)
    except Exception as error:
        raise project_write_unavailable(error) from None
    return {"projects": [project_view(project) for project in found]}


@router.post(
    "",
    status_code=201,
    summary="Create a project",
    responses=error_responses(401, 409, 422, 503),
)
async def create_project(
    body: NewProject, user: CurrentUser, runtime: RuntimeDep
) -> dict[str, Any]:
    name = _name(body.name)
    try:
        project = await to_thread(
            runtime.memory.create_project, user.subject, name, body.general_memory
        )
    except ProjectLimitError as error:
        raise Conflict(
            f"You have {error.limit} projects, the most there can be; delete one first.",
            code="project_limit",
        ) from None
    except Exception as error:
        raise project_write_unavailable(error) from None
    logger.info("projects.created")
    return project_view(project)


@router.patch(
    "/{project_id}",
    summary="Rename a project or opt it into the general memory document",
    responses=error_responses(401, 404, 422, 503),
)
async def change_project(
    project_id: str, body: ProjectChange, user: CurrentUser, runtime: RuntimeDep
) -> dict[str, Any]:
    if not is_conversation_id(project_id):  # never a query with an id not shaped like ours
        raise NotFound(NO_PROJECT)
    if body.name is None and body.general_memory is None:
        raise Unprocessable("Give a name, general_memory, or both.", code="invalid_request")
    name = None if body.name is None else _name(body.name)
    try:
        project = await to_thread(
            lambda: runtime.memory.change_project(
                user.subject, project_id, name=name, general_memory=body.general_memory
            )
        )
    except ProjectNotFoundError:
        raise NotFound(NO_PROJECT) from None
    except Exception as error:
        raise project_write_unavailable(error) from None
    logger.info("projects.changed")
    return project_view(project)


@router.delete(
    "/{project_id}",
    status_code=204,
    response_class=Response,
    summary="Delete a project, its memory, history and proposals",
    responses=error_responses(401, 404, 409, 503),
)
async def delete_project(
    project_id: str,
    user: CurrentUser,
    runtime: RuntimeDep,
    conversations: Literal["delete", "detach"] | None = Query(
        None,
        description="What happens to the project's conversations: `delete` them (messages and "
        "search index too) or `detach` them (they become general conversations). Required when "
        "the project has any.",
    ),
) -> Response:
    if not is_conversation_id(project_id):  # project ids are uuid4 text, as conversations'
        raise NotFound(NO_PROJECT)
    try:
        count = await to_thread(
            runtime.memory.delete_project, user.subject, project_id, conversations
        )
    except ProjectNotFoundError:
        raise NotFound(NO_PROJECT) from None
    except ProjectNotEmptyError as error:
        raise Conflict(
            f"The project has {error.conversations} conversations: say whether to delete or "
            "detach them (?conversations=delete or ?conversations=detach).",
            code="project_not_empty",
            details={"conversations": error.conversations},
        ) from None
    except Exception as error:
        raise project_write_unavailable(error) from None
    logger.info("projects.deleted", conversations=count, choice=conversations or "none")
    return Response(status_code=204)
