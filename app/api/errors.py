"""One mapping from errors to `{"error": {"code", "message"}}` responses."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.errors import AppError


def error_response(status: int, code: str, message: str,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


def _describe(error: RequestValidationError) -> str:
    parts = []
    for item in error.errors()[:5]:
        location = ".".join(str(part) for part in item.get("loc", ()) if part != "body")
        parts.append(f"{location or 'body'}: {item.get('msg', 'invalid')}")
    return "; ".join(parts) or "The request is not valid."


def install(app: FastAPI) -> None:
    @app.exception_handler(AppError)
    async def _app_error(_request: Request, error: AppError) -> JSONResponse:
        return error_response(error.status_code, error.code, error.message, error.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, error: RequestValidationError) -> JSONResponse:
        return error_response(422, "invalid_request", _describe(error))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, error: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "http_error")
        return error_response(error.status_code, code, str(error.detail), error.headers)
