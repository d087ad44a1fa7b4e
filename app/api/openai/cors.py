"""CORS for `/openai/v1` only, opt-in: browser-side chat clients (Open WebUI's Direct Connections,
where each user's browser calls the service with that user's own token) need it; every other
prefix, and this one while OPENAI_CORS_ORIGINS is empty, answers exactly as without it."""

from __future__ import annotations

from collections.abc import Callable

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

PREFIX = "/openai/v1/"


class OpenAICorsMiddleware:
    def __init__(self, app: ASGIApp, *, origins: Callable[[], tuple[str, ...]]) -> None:
        self.app = app
        # A callable: the settings are resolved in the lifespan, after the stack is built.
        self._origins = origins
        self._cors: tuple[tuple[str, ...], CORSMiddleware] | None = None

    def _middleware(self, origins: tuple[str, ...]) -> CORSMiddleware:
        if self._cors is None or self._cors[0] != origins:
            cors = CORSMiddleware(
                self.app,
                allow_origins=list(origins),
                allow_methods=["GET", "POST"],
                allow_headers=["*"],  # Authorization, Content-Type and SDK headers
                allow_credentials=False,  # the token travels in Authorization, never a cookie
                max_age=600,
            )
            self._cors = (origins, cors)
        return self._cors[1]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origins = self._origins() if scope["type"] == "http" else ()
        if not origins or not str(scope.get("path", "")).startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        await self._middleware(origins)(scope, receive, send)
