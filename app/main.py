"""The ASGI application: `create_app(settings)` and the module-level `app` for uvicorn."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.api import admin, chat, conversations, dev, errors, eval, health, memory
from app.runtime import build_runtime
from app.settings import Settings, get_settings


def create_app(settings: Settings | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        resolved = (settings or get_settings()).with_dev_secret()
        runtime = build_runtime(resolved)
        app.state.runtime = runtime
        try:
            yield
        finally:
            await runtime.aclose()

    app = FastAPI(
        title="Agent memory backend",
        version="0.1.0",
        lifespan=lifespan,
    )
    errors.install(app)
    for module in (health, dev, memory, admin, chat, eval, conversations):
        app.include_router(module.router)
    return app


app = create_app()
