"""A body that cannot be used reads the same on every route that takes one.

Not JSON (malformed, not UTF-8, empty, nested too deep): "The request body is not valid JSON."
JSON that is not an object: "The request body must be a JSON object." Native routes answer 422
(`invalid_json`, `invalid_request`); the OpenAI-compatible route answers the same words in
OpenAI's error shape with 400.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.bodies import NOT_JSON, NOT_OBJECT
from tests.support.apps import api_settings, app_client
from tests.support.databases import migrated_engine
from tests.support.tokens import dev_auth

EVAL_KEY = "e" * 32
OPERATOR = dev_auth("body-errors", ["operator"])

# Every route with a JSON body, and the headers that get it past authentication.
BODY_ROUTES: dict[tuple[str, str], dict[str, str]] = {
    ("POST", "/dev/token"): {},
    ("POST", "/auth/dev/login"): {},
    ("POST", "/v1/chat"): OPERATOR,
    ("POST", "/v1/eval/chat"): {"X-Eval-Key": EVAL_KEY},
    ("POST", "/v1/memory/operations"): OPERATOR,
    ("PUT", "/v1/admin/flags/{name}"): OPERATOR,
    ("PUT", "/v1/memory/settings"): OPERATOR,
    ("PATCH", "/v1/conversations/{conversation_id}"): OPERATOR,
    ("POST", "/openai/v1/chat/completions"): OPERATOR,
    ("POST", "/v1/memory/import"): OPERATOR,
    ("DELETE", "/v1/account"): OPERATOR,
    ("POST", "/v1/projects"): OPERATOR,
    ("PATCH", "/v1/projects/{project_id}"): OPERATOR,
}
PATH_VALUES = {
    "name": "memory",
    "conversation_id": "00000000-0000-4000-8000-000000000000",
    "project_id": "00000000-0000-4000-8000-000000000000",
}

UNUSABLE: list[Any] = [
    pytest.param(b"{oops", NOT_JSON, id="malformed"),
    pytest.param(b'{"a": "\xff"}', NOT_JSON, id="not-utf8"),
    pytest.param(b"", NOT_JSON, id="empty"),
    pytest.param(b"[" * 20_000 + b"]" * 20_000, NOT_JSON, id="nested-20000"),
    pytest.param(b"[]", NOT_OBJECT, id="array"),
    pytest.param(b'"text"', NOT_OBJECT, id="string"),
    pytest.param(b"null", NOT_OBJECT, id="null"),
    pytest.param(b"7", NOT_OBJECT, id="number"),
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path_factory.mktemp('bodies') / 'bodies.db'}"
    migrated_engine(url).dispose()
    with app_client(api_settings(url, eval_api_key=EVAL_KEY)) as client:
        yield client


def test_the_table_names_every_route_that_takes_a_body(client: TestClient) -> None:
    """A new route with a request body must join BODY_ROUTES, so it is held to the same words."""
    schema = client.app.openapi()  # type: ignore[attr-defined]
    with_body = {
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if "requestBody" in operation
    }
    assert with_body == set(BODY_ROUTES)


@pytest.mark.parametrize(("raw", "message"), UNUSABLE)
@pytest.mark.parametrize("route", list(BODY_ROUTES), ids=lambda route: f"{route[0]} {route[1]}")
def test_an_unusable_body_reads_the_same_everywhere(
    client: TestClient, route: tuple[str, str], raw: bytes, message: str
) -> None:
    """The same message and code for the same unusable body on every body-taking route."""
    method, template = route
    path = template.format(**PATH_VALUES)
    headers = {**BODY_ROUTES[route], "content-type": "application/json"}
    response = client.request(method, path, content=raw, headers=headers)
    error = response.json()["error"]
    code = "invalid_json" if message == NOT_JSON else "invalid_request"
    if path.startswith("/openai/"):
        assert response.status_code == 400, response.text
        assert error == {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": code,
        }
    else:
        assert response.status_code == 422, response.text
        assert error == {"code": code, "message": message}
