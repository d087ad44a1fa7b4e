"""The request edge of authentication: the bearer token read from a request and verified.

Verification itself (dev tokens, OIDC, the verified-token cache) is app/identity/tokens.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
from fastapi import Request

from app.errors import Unauthorized
from app.identity.tokens import Identity, InvalidToken

if TYPE_CHECKING:
    from app.runtime import Runtime

logger = structlog.get_logger(__name__)


def bearer_token(request: Request) -> str:
    header = request.headers.get("authorization")
    if not header:
        raise Unauthorized("A bearer token is required.", code="missing_token")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise InvalidToken("The Authorization header must be 'Bearer <token>'.")
    return token


async def authenticate(request: Request, runtime: Runtime) -> Identity:
    try:
        return await runtime.verifier.verify(bearer_token(request))
    except Unauthorized as error:
        logger.info("auth.rejected", code=error.code, mode=runtime.settings.auth_mode)
        raise
