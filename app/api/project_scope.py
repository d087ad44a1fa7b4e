"""The `project_id` query parameter of the memory routes: the scope a request runs in. A project
that is not the caller's (or does not exist) is a 404, never a 403: no existence oracle."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import structlog
from fastapi import Depends, Query

from app.api.deps import CurrentUser, RuntimeDep
from app.concurrency import to_thread
from app.conversations.service import is_conversation_id
from app.errors import NotFound, ServiceUnavailable
from app.memory.projects import GENERAL, Project, Scope
from app.memory.service import MemoryBusyError

NO_PROJECT = "No such project."

logger = structlog.get_logger(__name__)


def project_write_unavailable(error: Exception) -> ServiceUnavailable:
    """The 503 of a failed project write (a project, or a conversation's move): `memory_busy`
    when another change of the person's held their writer lock too long."""
    logger.warning("projects.failed", error=type(error).__name__)
    if isinstance(error, MemoryBusyError):
        return ServiceUnavailable(
            "Memory is busy with another change; nothing was changed. Retry shortly.",
            code="memory_busy",
        )
    return ServiceUnavailable("Memory cannot be reached right now.", code="memory_unavailable")


@dataclass(frozen=True)
class RouteScope:
    """The scope of a memory route: outside projects (`project` None) or in the caller's
    project, for the person themself (every document of the scope is theirs to edit)."""

    scope: Scope
    project: Project | None = None

    def view(self) -> dict[str, Any]:
        """The response's `scope`: where the documents shown apply."""
        if self.project is None:
            return {"project_id": None, "general_memory": None}
        return {"project_id": self.project.id, "general_memory": self.project.general_memory}


async def find_project(runtime: RuntimeDep, user_id: str, project_id: str) -> Project:
    """The caller's project, or a 404 (an id of the wrong shape never reaches the database)."""
    if not is_conversation_id(project_id):  # project ids are uuid4 text too
        raise NotFound(NO_PROJECT)
    try:
        project = await to_thread(runtime.memory.get_project, user_id, project_id)
    except Exception as error:
        raise ServiceUnavailable(
            "Memory cannot be reached right now.", code="memory_unavailable"
        ) from error
    if project is None:
        raise NotFound(NO_PROJECT)
    return project


async def route_scope(
    user: CurrentUser,
    runtime: RuntimeDep,
    project_id: Annotated[
        str | None,
        Query(
            max_length=64,
            description="Run in this project's scope (its `project` document, history and "
            "proposals); omitted: outside projects",
        ),
    ] = None,
) -> RouteScope:
    if project_id is None:
        return RouteScope(GENERAL)
    project = await find_project(runtime, user.subject, project_id)
    return RouteScope(Scope(project.id), project)


ProjectQuery = Annotated[RouteScope, Depends(route_scope)]
