"""Dev-mode identity: every bad token is a 401 that reads and writes nothing; dev tokens work."""

from __future__ import annotations

import httpx
import jwt
import pytest
from sqlalchemy import Engine

from app.identity.tokens import DEV_AUDIENCE, DEV_ISSUER
from app.settings import Settings
from tests.support.apps import api_settings, app_client, memory_rows, served
from tests.support.tokens import (
    TEST_DEV_SECRET,
    bearer,
    claims,
    dev_auth,
    dev_token,
    unsigned_token,
)

ADD = {"operations": [{"target": "user", "action": "add", "content": "Prefers tea."}]}

BAD_AUTHORIZATION: list[tuple[str, dict[str, str]]] = [
    ("missing", {}),
    ("empty", {"Authorization": ""}),
    ("basic_scheme", {"Authorization": "Basic YWxpY2U6c2VjcmV0"}),
    ("bearer_without_token", {"Authorization": "Bearer"}),
    ("bearer_two_words", {"Authorization": "Bearer abc def"}),
    ("garbage", bearer("not-a-jwt")),
    ("two_parts", bearer("abc.def")),
    ("expired", bearer(dev_token(exp=1_000_000, iat=999_000, nbf=999_000))),
    ("not_yet_valid", bearer(dev_token(nbf=4_000_000_000))),
    ("wrong_secret", bearer(dev_token(secret="another-secret-that-is-long-enough-000"))),
    ("alg_none", bearer(unsigned_token(claims("alice")))),
    ("wrong_issuer", bearer(dev_token(issuer="someone-else"))),
    ("wrong_audience", bearer(dev_token(audience="another-api"))),
    ("missing_issuer", bearer(dev_token(iss=None))),
    ("missing_audience", bearer(dev_token(aud=None))),
    ("missing_exp", bearer(dev_token(exp=None))),
    ("missing_sub", bearer(dev_token(sub=None))),  # type: ignore[arg-type]
    ("empty_sub", bearer(dev_token(sub=""))),
    ("sub_not_string", bearer(dev_token(sub=42))),  # type: ignore[arg-type]
    ("sub_too_long", bearer(dev_token(sub="a" * 129))),
    ("hs512", bearer(jwt.encode(claims("alice"), TEST_DEV_SECRET, algorithm="HS512"))),
]


@pytest.fixture
def settings(db: Engine, sqlite_url: str) -> Settings:
    return api_settings(sqlite_url)


def _assert_unauthorized(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"] == "Bearer"
    error = response.json()["error"]
    assert error["code"] in {"missing_token", "invalid_token", "token_expired"}
    assert error["message"]


@pytest.mark.parametrize(
    ("case", "headers"), BAD_AUTHORIZATION, ids=[c for c, _ in BAD_AUTHORIZATION]
)
def test_bad_tokens_are_401_and_touch_nothing_in_process(
    case: str, headers: dict[str, str], settings: Settings, db: Engine
) -> None:
    """Every bad-token case in API.md is a 401 with WWW-Authenticate: Bearer and a JSON error,
    for reads, writes and deletes alike, and no memory row is written or removed."""
    with app_client(settings) as client:
        client.post("/v1/memory/operations", json=ADD, headers=dev_auth("alice"))
        assert memory_rows(db) == 1
        _assert_unauthorized(client.get("/v1/memory", headers=headers))
        _assert_unauthorized(client.post("/v1/memory/operations", json=ADD, headers=headers))
        _assert_unauthorized(client.delete("/v1/memory", headers=headers))
        _assert_unauthorized(client.get("/v1/admin/flags", headers=headers))
    assert memory_rows(db) == 1


def test_bad_tokens_are_401_over_real_http(settings: Settings, db: Engine) -> None:
    """The same 401 contract holds through uvicorn, header parsing included."""
    with served(settings) as url, httpx.Client(base_url=url) as client:
        for _case, headers in BAD_AUTHORIZATION:
            _assert_unauthorized(client.post("/v1/memory/operations", json=ADD, headers=headers))
            _assert_unauthorized(client.get("/v1/memory", headers=headers))
        assert client.get("/v1/memory", headers=dev_auth("alice")).status_code == 200
    assert memory_rows(db) == 0


def test_dev_token_route_issues_verifiable_tokens(settings: Settings) -> None:
    """POST /dev/token returns the documented shape; the token carries the dev issuer and
    audience, the subject and roles, and it authenticates."""
    with app_client(settings) as client:
        response = client.post("/dev/token", json={"sub": "alice", "roles": ["operator"]})
        assert response.status_code == 200
        body = response.json()
        assert body["token_type"] == "bearer"
        assert body["expires_in"] == settings.auth_dev_token_ttl_seconds
        decoded = jwt.decode(
            body["access_token"],
            TEST_DEV_SECRET,
            algorithms=["HS256"],
            audience=DEV_AUDIENCE,
            issuer=DEV_ISSUER,
        )
        assert decoded["sub"] == "alice" and decoded["roles"] == ["operator"]
        assert decoded["exp"] - decoded["iat"] == settings.auth_dev_token_ttl_seconds
        assert (
            client.get("/v1/admin/flags", headers=bearer(body["access_token"])).status_code == 200
        )

        plain = client.post("/dev/token", json={"sub": "bob"}).json()["access_token"]
        assert client.get("/v1/memory", headers=bearer(plain)).status_code == 200
        assert client.get("/v1/admin/flags", headers=bearer(plain)).status_code == 403


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"sub": ""},
        {"sub": "a" * 129},
        {"sub": "alice", "roles": "operator"},
        {"sub": "alice", "user_id": "bob"},
        {"sub": 5},
    ],
    ids=["no_sub", "empty_sub", "long_sub", "roles_not_list", "unknown_field", "sub_not_str"],
)
def test_dev_token_route_rejects_bad_bodies(body: dict[str, object], settings: Settings) -> None:
    """A malformed token request is a 422 with the error body, never a token."""
    with app_client(settings) as client:
        response = client.post("/dev/token", json=body)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_request"


def test_leeway_accepts_a_token_just_expired(sqlite_url: str, db: Engine) -> None:
    """exp is checked with AUTH_LEEWAY_SECONDS of tolerance for clock skew, and no more."""
    import time

    now = int(time.time())
    settings = api_settings(sqlite_url, auth_leeway_seconds=60)
    with app_client(settings) as client:
        recent = dev_auth("alice", exp=now - 10, iat=now - 100, nbf=now - 100)
        old = dev_auth("alice", exp=now - 120, iat=now - 200, nbf=now - 200)
        assert client.get("/v1/memory", headers=recent).status_code == 200
        _assert_unauthorized(client.get("/v1/memory", headers=old))


def test_operator_routes_need_the_role(settings: Settings) -> None:
    """/v1/admin/* is 401 without a token, 403 without the operator role, 200 with it."""
    with app_client(settings) as client:
        _assert_unauthorized(client.get("/v1/admin/flags"))
        forbidden = client.get("/v1/admin/flags", headers=dev_auth("alice", ["viewer"]))
        assert forbidden.status_code == 403
        assert forbidden.json()["error"]["code"] == "forbidden"
        assert (
            client.get("/v1/admin/flags", headers=dev_auth("op", ["operator"])).status_code == 200
        )
