"""Operator routes: the memory feature flag, stored in the database for every replica, and the
erasure of a user."""

from __future__ import annotations

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, StrictBool

from app.api.account.erasure import erase
from app.api.deps import Operator, RuntimeDep
from app.api.errors import BODY_ERRORS, error_responses
from app.errors import NotFound, ServiceUnavailable, Unprocessable
from app.identity.tokens import subject_problem
from app.memory.flags import KNOWN_FLAGS, FlagState, FlagUnavailableError

router = APIRouter(prefix="/v1/admin", tags=["admin"])


class FlagUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: StrictBool


class FlagView(BaseModel):
    name: str
    enabled: bool
    source: str  # "database" once an operator set it, else "default" (MEMORY_ENABLED)
    updated_by: str | None = None


class FlagsView(BaseModel):
    flags: dict[str, FlagView]


def _view(state: FlagState) -> FlagView:
    return FlagView(
        name=state.name, enabled=state.enabled, source=state.source, updated_by=state.updated_by
    )


@router.get("/flags", response_model=FlagsView, responses=error_responses(401, 403, 503))
async def list_flags(_operator: Operator, runtime: RuntimeDep) -> FlagsView:
    try:
        states = [await runtime.flags.get(name) for name in KNOWN_FLAGS]
    except FlagUnavailableError:
        raise ServiceUnavailable(
            "The flags cannot be read right now; memory is off until they can.",
            code="flags_unavailable",
        ) from None
    return FlagsView(flags={state.name: _view(state) for state in states})


@router.put(
    "/flags/{name}",
    response_model=FlagView,
    responses=error_responses(*BODY_ERRORS, 401, 403, 404, 503),
)
async def set_flag(
    name: str, body: FlagUpdate, operator: Operator, runtime: RuntimeDep
) -> FlagView:
    if name not in KNOWN_FLAGS:
        raise NotFound(f"There is no flag named {name!r}.")
    # Switching memory off deletes nothing: rows and tables stay, only writes and the tool stop.
    state = await runtime.flags.set(name, body.enabled, updated_by=operator.subject)
    return _view(state)


@router.delete(
    "/users/{subject}",
    status_code=204,
    response_class=Response,
    summary="Erase a user: every row about the subject (one audit row stays)",
    responses=error_responses(401, 403, 422, 503),
)
async def erase_user(subject: str, _operator: Operator, runtime: RuntimeDep) -> Response:
    """Idempotent: a subject with nothing stored answers 204 too."""
    problem = subject_problem(subject)
    if problem is not None:
        raise Unprocessable(f"The subject {problem}.")
    await erase(runtime.erasure, subject)
    return Response(status_code=204)
