"""Errors by contract: one JSON error body, 4xx for bad input, 413 for big bodies, clean start."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from app.main import create_app
from app.settings import Settings, SettingsError, get_settings
from tests.support.apps import api_settings, app_client, served
from tests.support.tokens import dev_auth

REPO = Path(__file__).resolve().parents[2]
LIMIT = 4096
ALICE = dev_auth("alice")


@pytest.fixture
def settings(db: Engine, sqlite_url: str) -> Settings:
    """On the emptied session database (`db`): a test before this one may have left the
    memory flag off, which would turn these errors into 409s."""
    return api_settings(sqlite_url, max_request_bytes=LIMIT)


def _error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code"),
    [
        (
            "post",
            "/dev/token",
            {"content": b"{oops", "headers": {"content-type": "application/json"}},
            422,
            "invalid_json",
        ),
        ("post", "/dev/token", {"json": ["alice"]}, 422, "invalid_request"),
        ("post", "/dev/token", {"json": {"sub": ["alice"]}}, 422, "invalid_request"),
        (
            "post",
            "/dev/token",
            {"content": b"sub=alice", "headers": {"content-type": "text/plain"}},
            422,
            "invalid_json",
        ),
        (
            "put",
            "/v1/admin/flags/memory",
            {"content": b"true", "headers": dev_auth("op", ["operator"])},
            422,
            "invalid_request",
        ),
        (
            "post",
            "/v1/memory/operations",
            {"json": "operations", "headers": ALICE},
            422,
            "invalid_request",
        ),
        (
            "post",
            "/v1/memory/operations",
            {"json": {"operations": [None]}, "headers": ALICE},
            422,
            "invalid_operation",
        ),
        (
            "post",
            "/v1/memory/operations",
            {
                "json": {"operations": [{"target": "user", "action": "add", "content": 7}]},
                "headers": ALICE,
            },
            422,
            "invalid_operation",
        ),
        ("get", "/v1/nowhere", {}, 404, "not_found"),
        ("patch", "/v1/memory", {"headers": ALICE}, 405, "method_not_allowed"),
    ],
    ids=[
        "broken_json",
        "array",
        "sub_list",
        "text_plain",
        "flag_bare_bool",
        "memory_string",
        "memory_null_op",
        "memory_number_content",
        "unknown_route",
        "wrong_method",
    ],
)
def test_bad_requests_are_4xx_with_the_error_body(
    method: str, path: str, kwargs: dict[str, object], status: int, code: str, settings: Settings
) -> None:
    """Bodies that are not JSON or not the expected shape, unknown routes and wrong methods are
    4xx with {"error": {"code", "message"}}, never a 500."""
    with app_client(settings) as client:
        _error(client.request(method.upper(), path, **kwargs), status, code)  # type: ignore[arg-type]


def test_declared_oversize_body_is_413_before_the_app_reads_it(settings: Settings) -> None:
    """A Content-Length above MAX_REQUEST_BYTES is 413 payload_too_large, in process and over
    real HTTP, before authentication or parsing."""
    big = {"operations": [{"target": "user", "action": "add", "content": "x" * LIMIT}]}
    with app_client(settings) as client:
        _error(
            client.post("/v1/memory/operations", json=big, headers=ALICE), 413, "payload_too_large"
        )
        _error(client.post("/dev/token", json={"sub": "a" * LIMIT}), 413, "payload_too_large")
    with served(settings) as url:
        response = httpx.post(f"{url}/v1/memory/operations", json=big, headers=ALICE)
        _error(response, 413, "payload_too_large")
        assert response.headers["x-request-id"]


def test_streamed_oversize_body_is_413(settings: Settings) -> None:
    """A chunked body with no Content-Length is cut off once it passes the limit: 413."""

    def chunks() -> Iterator[bytes]:
        yield b'{"operations": [{"target": "user", "action": "add", "content": "'
        for _ in range(4):
            yield b"y" * 2048
        yield b'"}]}'

    with served(settings) as url:
        for path, headers in (("/v1/memory/operations", ALICE), ("/dev/token", {})):
            response = httpx.post(
                f"{url}{path}",
                content=chunks(),
                headers={**headers, "content-type": "application/json"},
            )
            _error(response, 413, "payload_too_large")


def test_bodies_under_the_limit_pass(settings: Settings) -> None:
    """The limit counts bytes: a body just under it is served normally."""
    content = "z" * 1000
    with app_client(settings) as client:
        response = client.post(
            "/v1/memory/operations",
            headers=ALICE,
            json={"operations": [{"target": "user", "action": "add", "content": content}]},
        )
        assert response.status_code == 200
        client.delete("/v1/memory", headers=ALICE)


def test_request_id_is_echoed_or_minted(settings: Settings) -> None:
    """Every response carries X-Request-ID: the caller's when it is plain, else a fresh one."""
    with app_client(settings) as client:
        assert (
            client.get("/healthz", headers={"x-request-id": "req-42"}).headers["x-request-id"]
            == "req-42"
        )
        minted = client.get("/healthz", headers={"x-request-id": "bad id\t<script>"})
        assert re.fullmatch(r"[0-9a-f]{32}", minted.headers["x-request-id"])
        assert client.get("/v1/memory").headers["x-request-id"]


def test_no_base_http_middleware() -> None:
    """Only pure ASGI middleware is installed (BaseHTTPMiddleware breaks disconnects)."""
    from starlette.middleware.base import BaseHTTPMiddleware

    app = create_app()
    assert app.user_middleware
    for middleware in app.user_middleware:
        assert not (
            isinstance(middleware.cls, type) and issubclass(middleware.cls, BaseHTTPMiddleware)
        )


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({"AUTH_MODE": "bogus"}, "AUTH_MODE: Input should be 'dev' or 'oidc'"),
        ({"AUTH_DEV_SECRET": "too-short"}, "AUTH_DEV_SECRET must be at least 32 characters"),
        ({"AUTH_MODE": "oidc"}, "AUTH_MODE=oidc needs AUTH_JWKS_URL, AUTH_ISSUER, AUTH_AUDIENCE"),
        (
            {
                "AUTH_MODE": "oidc",
                "AUTH_JWKS_URL": "http://127.0.0.1:9/jwks",
                "AUTH_ISSUER": "i",
                "AUTH_AUDIENCE": "a",
                "AUTH_ALGORITHMS": "HS256",
            },
            "AUTH_ALGORITHMS accepts only",
        ),
        ({"MAX_MESSAGE_CHARS": "0"}, "MAX_MESSAGE_CHARS"),
    ],
    ids=["unknown_mode", "short_secret", "oidc_without_provider", "oidc_hs256", "bad_number"],
)
def test_invalid_settings_stop_start_up_with_a_clear_message(
    environment: dict[str, str], expected: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The lifespan refuses to start on invalid settings and says which setting is wrong."""
    monkeypatch.chdir(tmp_path)  # no stray .env
    monkeypatch.setenv("AUTH_DEV_SECRET_FILE", str(tmp_path / "secret"))
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    try:
        with pytest.raises(SettingsError, match=re.escape(expected)), TestClient(create_app()):
            pass
    finally:
        get_settings.cache_clear()


def test_env_example_lists_every_setting_with_its_default() -> None:
    """.env.example names every setting, each with a comment, and loading it yields the
    defaults (so copying it to .env changes nothing)."""
    text = (REPO / ".env.example").read_text()
    lines = text.splitlines()
    for name in Settings.model_fields:
        variable = name.upper()
        index = next((i for i, line in enumerate(lines) if line.startswith(f"{variable}=")), None)
        assert index is not None, f"{variable} is missing from .env.example"
        assert lines[index - 1].startswith("#"), f"{variable} has no comment line"
    from_example = Settings(_env_file=REPO / ".env.example")  # type: ignore[call-arg]
    assert from_example.model_dump() == Settings(_env_file=None).model_dump()  # type: ignore[call-arg]
    assert Settings.model_fields["max_message_chars"].default == 32_000


def test_a_database_outage_is_a_503_not_a_crash(tmp_path: Path) -> None:
    """Invariant: a database that cannot answer is a 503 with the error body, never a 500."""
    empty = tmp_path / "not-migrated.db"
    settings = api_settings(f"sqlite:///{empty}")
    with app_client(settings) as client:
        response = client.get("/v1/conversations", headers=dev_auth("alice"))
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "database_unavailable"
