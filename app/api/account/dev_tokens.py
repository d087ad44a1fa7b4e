"""`POST /dev/token`: mint a dev token (AUTH_MODE=dev only; 404 otherwise)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from app.api.deps import RuntimeDep
from app.api.errors import BODY_ERRORS, error_responses
from app.errors import NotFound
from app.identity.tokens import MAX_SUBJECT_CHARS, subject_problem

router = APIRouter(tags=["dev"])


def _valid_subject(subject: str) -> str:
    """The same rule the token check applies: a token minted here is always accepted."""
    problem = subject_problem(subject)
    if problem is not None:
        raise ValueError(f"the subject {problem}")
    return subject


Subject = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_SUBJECT_CHARS),
    AfterValidator(_valid_subject),
]
Role = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class DevTokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sub: Subject
    roles: list[Role] = Field(default_factory=list, max_length=16)


class TokenResponse(BaseModel):
    access_token: str
    token_type: str = "bearer"
    expires_in: int


@router.post(
    "/dev/token",
    response_model=TokenResponse,
    responses=error_responses(*BODY_ERRORS, 404),
)
async def issue_dev_token(body: DevTokenRequest, runtime: RuntimeDep) -> TokenResponse:
    if runtime.dev_tokens is None:
        raise NotFound("Not Found")
    token = runtime.dev_tokens.issue(body.sub, body.roles)
    return TokenResponse(access_token=token, expires_in=runtime.dev_tokens.ttl_seconds)
