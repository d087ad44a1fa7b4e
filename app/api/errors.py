"""One mapping from errors to `{"error": {"code", "message"}}` responses."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from app.api.bodies import body_error, is_undecodable, not_json
from app.api.openai.errors import BUSY_HEADERS, CLIENT_CLOSED, OPENAI_PREFIX, openai_http_error
from app.db.admission import DatabaseBusyError
from app.errors import AppError

logger = structlog.get_logger(__name__)

_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def error_response(
    status: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
    details: dict[str, Any] | None = None,
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message, **(details or {})}},
        status_code=status,
        headers=headers,
    )


def _describe(error: RequestValidationError) -> str:
    # Location and pydantic's message only: the offending input is never echoed back or logged.
    parts = []
    for item in error.errors()[:5]:
        location = ".".join(str(part) for part in item.get("loc", ()) if part != "body")
        parts.append(f"{location or 'body'}: {item.get('msg', 'invalid')}")
    return "; ".join(parts) or "The request is not valid."


def _route(request: Request) -> str | None:
    """The route template (`/v1/conversations/{conversation_id}`), never the raw path."""
    route = request.scope.get("route")
    return getattr(route, "path", None)


def install(app: FastAPI) -> None:
    @app.exception_handler(AppError)
    async def _app_error(_request: Request, error: AppError) -> JSONResponse:
        return error_response(
            error.status_code, error.code, error.message, error.headers, error.details
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, error: RequestValidationError) -> JSONResponse:
        unusable = body_error(error.errors())
        if unusable is not None:  # not JSON, or not an object: the words every route uses
            return error_response(422, unusable.code, unusable.message)
        return error_response(422, "invalid_request", _describe(error))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> JSONResponse:
        if request.url.path.startswith(OPENAI_PREFIX):
            # Unknown URLs and wrong methods under the OpenAI-compatible prefix: OpenAI's shape.
            return openai_http_error(error)
        if error.status_code == 400 and is_undecodable(error):
            # FastAPI's own 400 for a body it could not decode reads like every other route's.
            unusable = not_json()
            return error_response(422, unusable.code, unusable.message)
        code = _HTTP_CODES.get(error.status_code, "http_error")
        headers = dict(error.headers) if error.headers else None
        return error_response(error.status_code, code, str(error.detail), headers)

    @app.exception_handler(ClientDisconnect)
    async def _client_left(request: Request, _error: ClientDisconnect) -> Response:
        # The client left while its body was being read (or its body timed out, see
        # app/http_protocol.py): nobody gets this answer, and it is no fault of the service,
        # so it is logged as a fact, without a traceback.
        logger.info("request.client_left", route=_route(request))
        return Response(status_code=CLIENT_CLOSED)

    @app.exception_handler(DatabaseBusyError)
    async def _busy(request: Request, _error: DatabaseBusyError) -> JSONResponse:
        # Every worker is busy and the line is full (or was waited in too long): a healthy
        # database under load, so the client is asked to come back, not told it is down.
        logger.warning("request.database_busy", route=_route(request))
        return error_response(
            503, "database_busy", "The service is busy; retry shortly.", BUSY_HEADERS
        )

    @app.exception_handler(SQLAlchemyError)
    async def _database(request: Request, error: SQLAlchemyError) -> JSONResponse:
        # A database outage is the server's temporary state, not a bug in the request: 503,
        # so clients and load balancers retry instead of reporting a crash.
        logger.warning("request.database_error", error=type(error).__name__, route=_route(request))
        return error_response(
            503, "database_unavailable", "The database is unavailable; retry shortly."
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception) -> JSONResponse:
        # Starlette re-raises after this response, so the traceback still reaches the server log.
        logger.error("request.failed", error=type(error).__name__, route=_route(request))
        return error_response(500, "internal_error", "An unexpected error occurred.")


# -- OpenAPI: every error a route can answer is declared, with the one error body -------------


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


_ERROR_DESCRIPTIONS = {
    400: "The request cannot be read (bad_request)",
    401: "Missing or invalid credentials",
    403: "The token lacks the role this route needs (forbidden)",
    404: "No such resource for this caller (not_found)",
    409: "The memory feature is off (memory_disabled)",
    413: "The request body or message is too large (payload_too_large)",
    422: "Not JSON (invalid_json), not an object, or against the contract; nothing changed",
    429: "Over a limit (rate_limited), before anything was streamed; see Retry-After",
    503: "The database is unavailable; retry shortly",
}


@contextmanager
def unavailable_on_failure(
    log: Any, event: str, unavailable: Callable[[], AppError]
) -> Iterator[None]:
    """A failure of the block (the database late or down, anything unforeseen) becomes the
    route's `503` (`unavailable()`), logged on the route's own logger as `event` with the
    error's class name only: the translation every memory route made on its own."""
    try:
        yield
    except Exception as error:
        log.warning(event, error=type(error).__name__)
        raise unavailable() from None


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route: each status with the `{"error": {"code", "message"}}` body."""
    return {
        status: {"model": ErrorBody, "description": _ERROR_DESCRIPTIONS[status]}
        for status in statuses
    }


# Statuses any route that reads a JSON body can answer (middleware and body parsing).
BODY_ERRORS = (400, 413, 422)
