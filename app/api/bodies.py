"""A JSON request body that cannot be used: one wording on every route, whoever parsed it.

Routes that read their body themselves call `json_object`; routes whose body FastAPI parses
reach the same errors through `body_error`, which the error handlers apply to FastAPI's own
decode and type errors. The OpenAI-compatible prefix answers the same messages in its shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from app.errors import Unprocessable

NOT_JSON = "The request body is not valid JSON."
NOT_OBJECT = "The request body must be a JSON object."
NOT_JSON_TYPE = "Send the request body as JSON (Content-Type: application/json)."

# pydantic's error types for a whole body of the wrong type (a model, a dict).
_WRONG_TYPE = {"model_attributes_type", "model_type", "dict_type"}


def not_json() -> Unprocessable:
    return Unprocessable(NOT_JSON, code="invalid_json")


def not_object() -> Unprocessable:
    return Unprocessable(NOT_OBJECT)


def json_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or the error every route answers for it."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, empty, or nested beyond reason
        raise not_json() from None
    if not isinstance(value, dict):
        raise not_object()
    return value


def body_error(errors: Sequence[Mapping[str, Any]]) -> Unprocessable | None:
    """FastAPI's verdict on a body it parsed, in the words of `json_object`; None when the
    problem lies inside an object (a field), which the route's own message describes."""
    for item in errors:
        location = tuple(item.get("loc", ()))
        if item.get("type") == "json_invalid":
            return not_json()
        if location != ("body",):
            continue
        if item.get("type") == "missing":  # an empty body
            return not_json()
        if item.get("type") in _WRONG_TYPE:
            raw = item.get("input")
            if not isinstance(raw, bytes):
                return not_object()
            # FastAPI left it undecoded (no JSON content type): judge it as any other route
            # would, and name the content type only when the body itself is a JSON object.
            try:
                json_object(raw)
            except Unprocessable as error:
                return error
            return Unprocessable(NOT_JSON_TYPE)
    return None


def is_undecodable(error: BaseException) -> bool:
    """FastAPI's 400 for a JSON body it could not decode (not UTF-8, nested too deep)."""
    return isinstance(error.__cause__, ValueError | RecursionError)
