"""Errors under `/openai/v1` in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`:
one route class turns whatever a route raises (authentication, body checks, the handler) into
that body with the right status, so that the OpenAI SDKs raise their own typed errors."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import structlog
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from app.agent.openai_wire import INVALID_REQUEST, SERVER_ERROR, error_object
from app.api.openai_request import WireError
from app.db.admission import DatabaseBusyError
from app.errors import AppError

log = structlog.get_logger(__name__)

OPENAI_PREFIX = "/openai/"
CLIENT_CLOSED = 499  # nginx's status for a client that left before its answer
BUSY_HEADERS = {"Retry-After": "1"}
HTTP_CODES = {404: "unknown_url", 405: "method_not_allowed", 413: "payload_too_large"}
UNKNOWN_URL = (
    "Unknown URL: this service offers POST /openai/v1/chat/completions and "
    "GET /openai/v1/models under this prefix."
)


def openai_error_response(
    status: int,
    message: str,
    *,
    code: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    kind = SERVER_ERROR if status >= 500 else INVALID_REQUEST
    return JSONResponse(
        error_object(message, code=code, type=kind, param=param),
        status_code=status,
        headers=headers,
    )


def _as_openai_error(request: Request, error: Exception) -> JSONResponse:
    match error:
        case WireError():
            return openai_error_response(
                error.status, error.message, code=error.code, param=error.param
            )
        case AppError():
            # A body error is a 400 here, as on OpenAI; a 401 keeps its `WWW-Authenticate`.
            status = 400 if error.status_code in (413, 422) else error.status_code
            return openai_error_response(
                status, error.message, code=error.code, headers=error.headers
            )
        case RequestValidationError():
            return openai_error_response(400, "The request is not valid.", code="invalid_request")
        case StarletteHTTPException():
            return openai_http_error(error)
        case ClientDisconnect():
            # The client left while its body was being read: nobody gets this answer, and it
            # is no fault of the service (logged as a fact, without a traceback).
            log.info("request.client_left", route=_route(request))
            return openai_error_response(
                CLIENT_CLOSED, "The client closed the request.", code="client_closed"
            )
        case DatabaseBusyError():
            log.warning("request.database_busy", route=_route(request))
            return openai_error_response(
                503,
                "The service is busy; retry shortly.",
                code="database_busy",
                headers=BUSY_HEADERS,
            )
        case SQLAlchemyError():
            log.warning("request.database_error", error=type(error).__name__, route=_route(request))
            return openai_error_response(
                503, "The database is unavailable; retry shortly.", code="database_unavailable"
            )
        case _:
            # The traceback is logged message-free (the redaction layer's exception formatter).
            log.error(
                "request.failed", error=type(error).__name__, route=_route(request), exc_info=error
            )
            return openai_error_response(
                500, "An unexpected error occurred.", code="internal_error"
            )


def openai_http_error(error: StarletteHTTPException) -> JSONResponse:
    """A routing or transport error on the prefix (unknown URL, wrong method, body too large);
    the application's HTTP error handler sends these here for paths under `/openai/`."""
    headers = dict(error.headers) if error.headers else None
    message = UNKNOWN_URL if error.status_code == 404 else str(error.detail)
    code = HTTP_CODES.get(error.status_code, "http_error")
    return openai_error_response(error.status_code, message, code=code, headers=headers)


def _route(request: Request) -> str | None:
    return getattr(request.scope.get("route"), "path", None)


class OpenAIRoute(APIRoute):
    """A route whose failures (authentication, body, handler) answer in OpenAI's error shape."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def openai_shaped(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as error:
                return _as_openai_error(request, error)

        return openai_shaped
