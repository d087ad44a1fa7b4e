"""`Annotated` dependency aliases, so that a route reads like a sentence."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request

from app.api.auth import authenticate
from app.errors import Forbidden
from app.identity.tokens import OPERATOR_ROLE, Identity
from app.memory.scope import MemoryRequest, memory_scope, require_scope
from app.runtime import Runtime
from app.settings import Settings
from app.telemetry import bind_subject


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


# Dependencies are `async def`: FastAPI sends a plain `def` dependency to a worker thread, a
# thread hop per request to read an attribute.
async def runtime_dep(request: Request) -> Runtime:
    return get_runtime(request)


async def settings_dep(request: Request) -> Settings:
    return get_runtime(request).settings


RuntimeDep = Annotated[Runtime, Depends(runtime_dep)]
SettingsDep = Annotated[Settings, Depends(settings_dep)]


async def current_user(request: Request) -> AsyncIterator[Identity]:
    """Authenticate, then bind the verified subject as the memory owner for the whole request.

    The scope stays set until the response has been sent (streamed bodies included), and it is
    the only place memory code takes a user id from. Writes follow the memory feature flag, read
    within FLAG_READ_TIMEOUT_SECONDS: a flag that cannot be read turns writes off (fail-closed),
    and `request.state.memory_flag` says which it was ("enabled", "disabled", "unavailable").
    """
    runtime = get_runtime(request)
    identity = await browser_session(request, runtime) or await authenticate(request, runtime)
    bind_subject(identity.subject)  # log lines carry a stable hash, never the subject
    flag = await runtime.flags.memory_status()
    request.state.memory_flag = flag
    with memory_scope(identity.subject, flag == "enabled"):
        yield identity


CurrentUser = Annotated[Identity, Depends(current_user)]

# The web page's routes: only these accept the session cookie. /openai/v1 and /mcp are for
# programs, which send a Bearer token (and a cookie there would be a cross-site door).
BROWSER_PREFIX = "/v1/"


async def browser_session(request: Request, runtime: Runtime) -> Identity | None:
    """The person a session cookie signs in, for a /v1 request without an Authorization
    header (app/sessions/service.py: refresh and CSRF checks); None to verify a Bearer token."""
    sessions = runtime.sessions
    if (
        sessions is None
        or "authorization" in request.headers
        or not request.url.path.startswith(BROWSER_PREFIX)
    ):
        return None
    return await sessions.identify(request)


async def memory_request(_user: CurrentUser) -> MemoryRequest:
    """The bound scope (owner and whether writes are allowed) of an authenticated request."""
    return require_scope()


MemoryScope = Annotated[MemoryRequest, Depends(memory_request)]


async def operator(user: CurrentUser) -> Identity:
    if OPERATOR_ROLE not in user.roles:
        raise Forbidden("This route needs the operator role.")
    return user


Operator = Annotated[Identity, Depends(operator)]
