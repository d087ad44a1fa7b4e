"""`Annotated` dependency aliases, so that a route reads like a sentence."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.api.auth import Identity, authenticate
from app.errors import Forbidden
from app.runtime import Runtime
from app.settings import Settings


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def get_settings_dep(request: Request) -> Settings:
    return get_runtime(request).settings


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]


async def current_user(request: Request) -> Identity:
    return await authenticate(request, get_runtime(request))


CurrentUser = Annotated[Identity, Depends(current_user)]


async def operator(user: CurrentUser) -> Identity:
    if "operator" not in user.roles:
        raise Forbidden("This route needs the operator role.")
    return user


Operator = Annotated[Identity, Depends(operator)]
