"""Opt-in CORS on `/openai/v1` only, for browser-side clients (Open WebUI's Direct Connections):
a listed origin may call the prefix with its bearer token; any other origin, any other prefix,
and every prefix while OPENAI_CORS_ORIGINS is empty get no CORS headers at all."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from sqlalchemy import Engine

from tests.support.apps import api_settings, app_client
from tests.support.openai_sdk import MODEL
from tests.support.tokens import dev_auth

ORIGIN = "https://chat.example.com"
PREFLIGHT = {
    "Origin": ORIGIN,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization,content-type",
}


def test_a_listed_origin_may_call_the_openai_prefix(db: Engine, sqlite_url: str) -> None:
    """Preflight and the real request both carry the origin; credentials are never allowed."""
    settings = api_settings(sqlite_url, openai_cors_origins=(ORIGIN,))
    with app_client(settings) as client:
        preflight = client.options("/openai/v1/chat/completions", headers=PREFLIGHT)
        answer = client.post(
            "/openai/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "Hello"}]},
            headers={**dev_auth("browser-user"), "Origin": ORIGIN},
        )
        models = client.get("/openai/v1/models", headers={**dev_auth("b"), "Origin": ORIGIN})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    assert "access-control-allow-credentials" not in preflight.headers
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == ORIGIN
    assert models.headers["access-control-allow-origin"] == ORIGIN


@pytest.mark.parametrize(
    ("origins", "path", "origin"),
    [
        pytest.param(
            (ORIGIN,), "/openai/v1/chat/completions", "https://evil.example", id="unlisted-origin"
        ),
        pytest.param((ORIGIN,), "/v1/chat", ORIGIN, id="other-prefix"),
        pytest.param((ORIGIN,), "/v1/memory", ORIGIN, id="memory-api"),
        pytest.param((), "/openai/v1/chat/completions", ORIGIN, id="not-configured"),
    ],
)
def test_no_cors_headers_anywhere_else(
    db: Engine, sqlite_url: str, origins: tuple[str, ...], path: str, origin: str
) -> None:
    settings = api_settings(sqlite_url, openai_cors_origins=origins)
    with app_client(settings) as client:
        preflight = client.options(path, headers={**PREFLIGHT, "Origin": origin})
        plain = client.get(path, headers={**dev_auth("b"), "Origin": origin})
    assert preflight.status_code != 200
    for response in (preflight, plain):
        assert "access-control-allow-origin" not in response.headers


def test_origins_are_read_as_a_comma_list_and_checked(sqlite_url: str) -> None:
    settings = api_settings(
        sqlite_url, openai_cors_origins=" https://a.example ,http://localhost:3000/"
    )
    assert settings.openai_cors_origins == ("https://a.example", "http://localhost:3000")
    for bad in ("*", "https://a.example/chat", "chat.example.com", "https://a.example?x=1"):
        with pytest.raises(ValidationError, match="scheme://host"):
            api_settings(sqlite_url, openai_cors_origins=bad)
