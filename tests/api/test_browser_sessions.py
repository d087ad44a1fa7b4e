"""Browser sessions (app/sessions/, app/api/account/sign_in.py) on each database: the cookie,
the row behind it, CSRF protection of cookie writes, sign-out and erasure, and Bearer clients
unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select, update

from app.db.schema import web_sessions
from app.sessions.keys import session_hash
from app.sessions.store import utc_now
from app.settings import Settings, SettingsError, load_settings
from tests.api.test_mcp_server import connect
from tests.support.apps import api_settings, app_client, served
from tests.support.tokens import dev_auth

SESSION = "amem_session"
SETTINGS_WRITE = ("PUT", "/v1/memory/settings", {"save_mode": "ask"})


def settings(db_url: str, **overrides: Any) -> Settings:
    # Plain http in process: httpx keeps Secure cookies for https only (the browser tests run
    # with the default, Secure and `__Host-`).
    return api_settings(db_url, auth_cookie_secure=False, **overrides)


@pytest.fixture
def client(engine: Engine, db_url: str) -> Iterator[TestClient]:
    with app_client(settings(db_url)) as client:
        yield client


def sign_in(client: TestClient, name: str) -> dict[str, Any]:
    response = client.post("/auth/dev/login", json={"sub": name})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def replace_cookie(client: TestClient, value: str) -> None:
    client.cookies.clear()
    client.cookies.set(SESSION, value)


def sessions_of(engine: Engine, subject: str) -> int:
    with engine.connect() as connection:
        query = select(func.count()).where(web_sessions.c.subject == subject)
        return int(connection.execute(query.select_from(web_sessions)).scalar_one())


def save_mode(client: TestClient, name: str) -> str:
    response = client.get("/v1/memory/settings", headers=dev_auth(name))
    assert response.status_code == 200, response.text
    return str(response.json()["save_mode"])


def test_dev_sign_in_sets_an_httponly_secure_samesite_cookie(engine: Engine, db_url: str) -> None:
    """With the default settings the cookie is `__Host-` prefixed, Secure, HttpOnly,
    SameSite=Lax and persistent for the session's lifetime; its value is not what the table
    keeps (only its hash is)."""
    with app_client(api_settings(db_url, auth_session_seconds=3600)) as client:
        response = client.post("/auth/dev/login", json={"sub": "ada"})
    assert response.status_code == 200, response.text
    cookie = response.headers["set-cookie"]
    name, _, rest = cookie.partition("=")
    value = rest.split(";")[0]
    attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert name == "__Host-amem_session"
    assert {"httponly", "secure", "samesite=lax", "path=/", "max-age=3600"} <= attributes
    assert not any(attribute.startswith("domain") for attribute in attributes)
    with engine.connect() as connection:
        keys = connection.execute(select(web_sessions.c.id_hash)).scalars().all()
    assert keys == [session_hash(value)] and value not in keys


def test_the_cookie_signs_in_reads_and_session_says_who(client: TestClient) -> None:
    """After the dev sign-in, the cookie alone reads the person's data; `/auth/session` names
    them and hands out the CSRF token."""
    signed = sign_in(client, "ada")
    assert signed["subject"] == "ada" and signed["csrf_token"]
    session = client.get("/auth/session")
    assert session.status_code == 200
    assert session.json()["subject"] == "ada"
    assert session.json()["csrf_token"] == signed["csrf_token"]
    assert client.get("/v1/memory").status_code == 200


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        pytest.param({}, "no token", id="no-token"),
        pytest.param({"x-csrf-token": "made-up"}, "wrong token", id="wrong-token"),
        pytest.param(
            {"sec-fetch-site": "cross-site", "use-real-token": "1"}, "cross site", id="cross-site"
        ),
        pytest.param(
            {"sec-fetch-site": "same-site", "use-real-token": "1"}, "sibling site", id="same-site"
        ),
    ],
)
def test_a_forged_cookie_write_is_refused_and_changes_nothing(
    client: TestClient, headers: dict[str, str], reason: str
) -> None:
    """A write carried by the cookie without the session's CSRF token, or that the browser says
    another site sent, is 403 `csrf_refused` and writes nothing; with the token it goes through."""
    csrf = sign_in(client, "ada")["csrf_token"]
    if headers.pop("use-real-token", None):
        headers["x-csrf-token"] = csrf
    method, path, body = SETTINGS_WRITE
    refused = client.request(method, path, json=body, headers=headers)
    assert refused.status_code == 403, reason
    assert refused.json()["error"]["code"] == "csrf_refused"
    assert save_mode(client, "ada") == "auto"

    allowed = client.request(
        method, path, json=body, headers={"x-csrf-token": csrf, "sec-fetch-site": "same-origin"}
    )
    assert allowed.status_code == 200, allowed.text
    assert save_mode(client, "ada") == "ask"


def test_another_sessions_csrf_token_does_not_fit(client: TestClient, db_url: str) -> None:
    """The CSRF token is bound to its session: one read in another session is refused."""
    with app_client(settings(db_url)) as other:
        foreign = sign_in(other, "mallory")["csrf_token"]
    sign_in(client, "ada")
    method, path, body = SETTINGS_WRITE
    response = client.request(method, path, json=body, headers={"x-csrf-token": foreign})
    assert response.status_code == 403


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("tampered", id="made-up"),
        pytest.param(None, id="one-character-changed"),
    ],
)
def test_a_forged_or_tampered_cookie_is_refused(client: TestClient, value: str | None) -> None:
    """A cookie value nobody issued (made up, or a real one with a character changed) names no
    session: 401 on /v1 and on /auth/session, which also clears it."""
    sign_in(client, "ada")
    real = client.cookies[SESSION]
    forged = value or (real[:-1] + ("A" if real[-1] != "A" else "B"))
    replace_cookie(client, forged)
    response = client.get("/v1/memory")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "session_ended"
    session = client.get("/auth/session")
    assert session.status_code == 401
    assert f"{SESSION}=" in session.headers["set-cookie"]
    assert "max-age=0" in session.headers["set-cookie"].lower()


def test_sign_out_ends_the_session_for_every_copy_of_the_cookie(
    client: TestClient, engine: Engine
) -> None:
    """Sign-out deletes the row: the cookie, replayed later by someone who copied it, is refused.
    Sign-out itself needs the CSRF token (a forged one from another site does nothing)."""
    csrf = sign_in(client, "ada")["csrf_token"]
    stolen = client.cookies[SESSION]
    forged = client.post("/auth/logout", headers={"x-csrf-token": "nope"})
    assert forged.status_code == 403
    cross = client.post(
        "/auth/logout", headers={"x-csrf-token": csrf, "sec-fetch-site": "cross-site"}
    )
    assert cross.status_code == 403
    assert sessions_of(engine, "ada") == 1

    out = client.post("/auth/logout", headers={"x-csrf-token": csrf})
    assert out.status_code == 200
    assert out.json() == {"redirect_to": "/"}
    assert sessions_of(engine, "ada") == 0

    replace_cookie(client, stolen)
    assert client.get("/v1/memory").status_code == 401
    assert client.get("/auth/session").status_code == 401


def test_a_session_past_its_lifetime_is_refused_and_deleted(
    client: TestClient, engine: Engine
) -> None:
    """A session whose end has passed signs nobody in, and its row is deleted when found."""
    sign_in(client, "ada")
    with engine.begin() as connection:
        connection.execute(update(web_sessions).values(expires_at=utc_now() - timedelta(seconds=1)))
    assert client.get("/v1/memory").status_code == 401
    assert sessions_of(engine, "ada") == 0


def test_a_new_sign_in_ends_the_browsers_previous_session(
    client: TestClient, engine: Engine
) -> None:
    """Signing in again in the same browser replaces the cookie and ends the session it named."""
    sign_in(client, "ada")
    sign_in(client, "bob")
    assert sessions_of(engine, "ada") == 0
    assert sessions_of(engine, "bob") == 1


def test_erasing_a_person_deletes_their_sessions(client: TestClient, engine: Engine) -> None:
    """The account deletion (erasure) signs the person out everywhere: their sessions' rows
    are gone, so every browser's cookie is refused; another person's session is untouched."""
    with TestClient(client.app) as other:
        sign_in(other, "bob")
        csrf = sign_in(client, "ada")["csrf_token"]
        deleted = client.request(
            "DELETE", "/v1/account", json={"confirm": "ada"}, headers={"x-csrf-token": csrf}
        )
        assert deleted.status_code in (200, 204), deleted.text
        assert sessions_of(engine, "ada") == 0
        assert client.get("/v1/memory").status_code == 401
        assert other.get("/v1/memory").status_code == 200


def test_the_cookie_is_not_accepted_outside_v1(client: TestClient) -> None:
    """/openai/v1 is for programs with Bearer tokens: a browser's cookie there is no
    credential (401), so no other site can drive it with a signed-in person's cookie."""
    sign_in(client, "ada")
    response = client.get("/openai/v1/models")
    assert response.status_code == 401


def test_bearer_clients_are_unchanged_and_never_asked_for_csrf(client: TestClient) -> None:
    """A Bearer request is verified as before, whatever cookie rides along, and a write needs
    no CSRF token (a browser never attaches a Bearer token on its own)."""
    sign_in(client, "ada")
    method, path, body = SETTINGS_WRITE
    response = client.request(
        method, path, json=body, headers={**dev_auth("bob"), "sec-fetch-site": "cross-site"}
    )
    assert response.status_code == 200, response.text
    assert save_mode(client, "bob") == "ask"
    assert save_mode(client, "ada") == "auto"  # the cookie's person was not the one written
    assert client.get("/openai/v1/models", headers=dev_auth("bob")).status_code == 200
    assert client.get("/v1/memory", headers={"authorization": "Bearer nope"}).status_code == 401


async def test_mcp_takes_bearer_tokens_and_refuses_the_cookie(engine: Engine, db_url: str) -> None:
    """/mcp: a Bearer token works as before; the session cookie alone is refused (401)."""
    with served(settings(db_url)) as base:
        async with httpx.AsyncClient(base_url=base) as http:
            signed = await http.post("/auth/dev/login", json={"sub": "ada"})
            assert signed.status_code == 200
            refused = await http.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={
                    "accept": "application/json, text/event-stream",
                    "x-csrf-token": signed.json()["csrf_token"],
                },
            )
            assert refused.status_code == 401
        async with connect(base, "ada") as mcp:
            tools = (await mcp.list_tools()).tools
        assert tools


def test_sign_in_routes_exist_only_where_they_apply(db_url: str, engine: Engine) -> None:
    """Dev mode has no provider login (404); oidc mode without AUTH_CLIENT_ID has no browser
    sign-in at all (404), and tells the page so in /info."""
    with app_client(settings(db_url)) as client:
        assert client.get("/auth/login", follow_redirects=False).status_code == 404
        assert client.get("/info").json()["browser_sign_in"] is True


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        pytest.param({}, "AUTH_PUBLIC_URL, AUTH_SESSION_SECRET", id="missing"),
        pytest.param(
            {"auth_public_url": "https://chat.example.com", "auth_session_secret": "short"},
            "at least 32",
            id="short-secret",
        ),
        pytest.param(
            {
                "auth_public_url": "https://chat.example.com",
                "auth_session_secret": "s" * 40,
                "auth_scopes": "profile email",
            },
            "must include 'openid'",
            id="no-openid-scope",
        ),
        pytest.param(
            {"auth_public_url": "chat.example.com", "auth_session_secret": "s" * 40},
            "AUTH_PUBLIC_URL",
            id="not-a-url",
        ),
    ],
)
def test_browser_sign_in_settings_are_validated(overrides: dict[str, Any], problem: str) -> None:
    """AUTH_CLIENT_ID turns the browser sign-in on; what it needs is checked at start-up."""
    values: dict[str, Any] = {
        "_env_file": None,
        "auth_mode": "oidc",
        "auth_jwks_url": "https://id.example.com/jwks",
        "auth_issuer": "https://id.example.com",
        "auth_audience": "agent-memory",
        "auth_client_id": "agent-memory-web",
        **overrides,
    }
    with pytest.raises(SettingsError) as raised:
        load_settings(**values)
    assert problem in str(raised.value)
