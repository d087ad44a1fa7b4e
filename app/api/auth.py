"""Bearer-token authentication (dev HS256 or OIDC via JWKS). Placeholder: issue 3 implements it."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from app.errors import Unauthorized
from app.runtime import Runtime


@dataclass(frozen=True)
class Identity:
    subject: str
    roles: frozenset[str] = frozenset()


async def authenticate(request: Request, runtime: Runtime) -> Identity:
    raise Unauthorized("authentication is not implemented yet")
