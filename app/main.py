"""The ASGI application: `create_app(settings)` and the module-level `app` for uvicorn."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI
from starlette.routing import Route

from app.api import chat, errors, eval, health, metrics, openai_compat, projects, web
from app.api.account import dev_tokens, erasure, sign_in
from app.api.admin import flags, records
from app.api.conversations import routes as conversations
from app.api.memory import entries, history, imports, proposals
from app.api.middleware import BodySizeLimitMiddleware, RequestIdMiddleware
from app.api.openai.cors import OpenAICorsMiddleware
from app.mcp.server import PATH as MCP_PATH
from app.mcp.server import McpRoute, mcp_endpoint
from app.runtime import build_runtime
from app.settings import Settings, SettingsError, get_settings
from app.telemetry import configure_logging, configure_tracing, shutdown_tracing, start_export
from app.telemetry.metrics import MetricsListener, worker_exiting
from app.telemetry.middleware import TelemetryMiddleware

DEFAULT_MAX_REQUEST_BYTES: int = Settings.model_fields["max_request_bytes"].default


def create_app(
    settings: Settings | None = None, *, model_transport: httpx.AsyncBaseTransport | None = None
) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            resolved = (settings or get_settings()).with_dev_secret()
            runtime = build_runtime(resolved, model_transport=model_transport)
        except SettingsError:
            raise
        except (OSError, ValueError) as error:
            raise SettingsError(f"Invalid settings: {error}") from None
        configure_logging(resolved)
        start_export()
        app.state.runtime = runtime
        listener = None
        if resolved.metrics_port is not None:
            listener = MetricsListener(resolved.metrics_host, resolved.metrics_port)
            listener.start()
        try:
            async with mcp_endpoint(runtime) as endpoint:
                app.state.mcp_endpoint = endpoint
                yield
        finally:
            app.state.mcp_endpoint = None
            if listener is not None:
                listener.stop()
            await runtime.aclose()
            shutdown_tracing()
            worker_exiting()

    app = FastAPI(
        title="Agent memory backend",
        version="0.1.0",
        lifespan=lifespan,
        # Telemetry is ours (app/telemetry: the OpenTelemetry ASGI instrumentation, our spans,
        # redaction by construction). FastAPI's own layer would add a middleware to every
        # request and, with an OpenTelemetry log provider set, export unhandled exceptions'
        # messages and stack traces, which can quote user content.
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
    )
    errors.install(app)
    # The turn routes first: a request is matched against the included routers in this order,
    # each router it passes costing its routes' matching (no two routers share a path).
    for module in (
        chat,
        openai_compat,
        eval,
        health,
        dev_tokens,
        entries,
        history,
        proposals,
        imports,
        projects,
        flags,
        erasure,
        records,
        conversations,
        metrics,
        sign_in,
        web,
    ):
        if module is metrics and not (settings or get_settings()).metrics_on_main_port:
            continue  # served by the private listener alone (METRICS_PORT)
        app.include_router(module.router)
    # The MCP server (Streamable HTTP): every method reaches it, which serves POST only and
    # answers the rest 405 with `Allow: POST` (a stateless server offers no GET stream).
    app.router.routes.append(Route(MCP_PATH, McpRoute(), include_in_schema=False))

    def max_request_bytes() -> int:
        # Settings are resolved in the lifespan, after the middleware stack exists.
        runtime = getattr(app.state, "runtime", None)
        return runtime.settings.max_request_bytes if runtime else DEFAULT_MAX_REQUEST_BYTES

    def cors_origins() -> tuple[str, ...]:
        runtime = getattr(app.state, "runtime", None)
        return runtime.settings.openai_cors_origins if runtime else ()

    app.add_middleware(BodySizeLimitMiddleware, max_bytes=max_request_bytes)
    app.add_middleware(OpenAICorsMiddleware, origins=cors_origins)  # /openai/v1 only, opt-in
    app.add_middleware(TelemetryMiddleware)  # inside the request id, around everything else
    app.add_middleware(RequestIdMiddleware)  # outermost: even a 413 carries the request id
    configure_tracing(app, settings)  # before start: it wraps the middleware stack
    return app


app = create_app()
