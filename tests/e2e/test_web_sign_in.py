"""The browser sign-in against a real OpenID provider (PyPI's oidc-provider-mock, started on a
loopback port) in Debian's Chromium: the authorization-code round trip, a session that every tab
and a restarted browser share, refresh before the provider's token expires, a refused refresh,
sign-out seen by the other tabs, and cookies that are stolen, forged or used from another site.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect
from sqlalchemy import Engine, create_engine, select

from app.db.schema import web_sessions
from app.main import create_app
from app.sessions.store import utc_now
from tests.e2e.conftest import e2e_settings, guard, screenshot, sqlite_file
from tests.e2e.web import eventually, send, settled
from tests.support.oidc_provider import (
    CLIENT_ID,
    SESSION_SECRET,
    Provider,
    running_provider,
)
from tests.support.server import free_port, live_server

pytestmark = [
    pytest.mark.browser,
    # One screen: the sign-in is the same at every size (the layout tests cover the card).
    pytest.mark.parametrize("screen", ["desktop"], indirect=True),
    # The provider (its own thread, in this process) calls an Authlib hook Authlib deprecates.
    pytest.mark.filterwarnings("ignore:get_jwt_config:DeprecationWarning"),
]

ACCESS_SECONDS = 30  # the provider's access and ID tokens at sign-in
# Refreshed this long before they expire: here on every request (the provider's refreshed
# tokens last an hour), so a test sees refreshes without waiting for a clock.
MARGIN_SECONDS = 3600
SHORT_SESSION_SECONDS = 10
SESSION_ENDED = "Your session has ended. Please sign in again."


@dataclass(frozen=True)
class Site:
    base: str
    provider: Provider
    engine: Engine

    def session_rows(self, subject: str) -> list[Any]:
        with self.engine.connect() as connection:
            query = select(web_sessions).where(web_sessions.c.subject == subject)
            return list(connection.execute(query).all())

    def access_expiry(self, subject: str) -> datetime:
        (row,) = self.session_rows(subject)
        expiry: datetime = row.access_expires_at
        return expiry

    def session_end(self, subject: str) -> datetime:
        (row,) = self.session_rows(subject)
        end: datetime = row.expires_at
        return end


def serve(tmp_path_factory: pytest.TempPathFactory, **overrides: Any) -> Iterator[Site]:
    """The app in oidc mode against a fresh provider, with the browser sign-in on (Secure,
    `__Host-` cookies: Chromium keeps them on http://127.0.0.1)."""
    url = sqlite_file(tmp_path_factory.mktemp("sign-in"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with running_provider(access_seconds=ACCESS_SECONDS) as provider:
        settings = e2e_settings(
            url,
            auth_mode="oidc",
            auth_dev_secret=None,
            auth_jwks_url=f"{provider.issuer}/jwks",
            auth_issuer=provider.issuer,
            auth_audience=CLIENT_ID,
            auth_client_id=CLIENT_ID,
            auth_client_secret="client-secret",
            auth_public_url=base,
            auth_session_secret=SESSION_SECRET,
            auth_refresh_margin_seconds=MARGIN_SECONDS,
            **overrides,
        )
        engine = create_engine(url)
        try:
            with live_server(create_app(settings), port=port):
                yield Site(base, provider, engine)
        finally:
            engine.dispose()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    yield from serve(tmp_path_factory)


@pytest.fixture(scope="module")
def short_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """Sessions that end 10 seconds after sign-in, whatever the provider says."""
    yield from serve(tmp_path_factory, auth_session_seconds=SHORT_SESSION_SECONDS)


def sign_in(page: Page, site: Site, name: str, path: str = "/") -> None:
    """The whole round trip: the page's Sign in, the provider's form, back signed in."""
    page.goto(site.base + path)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{site.provider.issuer}/**")
    page.get_by_placeholder("sub").fill(name)
    page.get_by_role("button", name="Authorize").click()
    expect(page.locator("#account-name")).to_have_text(name)
    expect(page.locator("body")).to_have_attribute("data-ready", "true")


def open_page(context: BrowserContext, url: str) -> tuple[Page, list[str]]:
    page = context.new_page()
    errors = guard(page)
    page.goto(url)
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    return page, errors


def stable(read: Callable[[], datetime]) -> datetime | None:
    """The value once two reads a moment apart agree (the page's first requests have settled)."""
    first = read()
    time.sleep(0.3)
    return first if read() == first else None


def test_sign_in_through_the_provider_holds_in_every_tab_and_after_a_restart(
    site: Site, browser: Browser, page: Page, screen: str
) -> None:
    """The page sends the person to the provider (authorization code with PKCE) and comes back
    signed in, holding no token: a link opened in a new tab, a second tab and a browser
    restarted with its cookies are all signed in, and sidebar conversations are real links."""
    name = f"ada-{screen}@example.com"
    sign_in(page, site, name)
    screenshot(page, "signed-in-oidc")
    expect(send(page, "remember that I like tea")).to_have_attribute("data-state", "done")
    settled(page, 1)
    held = page.evaluate("() => JSON.stringify([{...sessionStorage}, {...localStorage}])")
    assert "eyJ" not in held  # no JWT anywhere the page can read
    assert page.evaluate("() => document.cookie") == ""  # the session cookie is HttpOnly

    link = page.locator("#conversation-list a.open").first
    href = link.get_attribute("href")
    assert href is not None and href.startswith("/c/")
    with page.context.expect_page() as opened:
        link.click(modifiers=["Control"])  # "open in new tab"
    second = opened.value
    expect(second.locator("#account-name")).to_have_text(name)
    expect(second.locator("#messages li.assistant")).to_have_count(1)
    assert second.url == site.base + href

    state = page.context.storage_state()
    (cookie,) = [c for c in state["cookies"] if c["name"] == "__Host-amem_session"]
    assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Lax"
    assert cookie["expires"] > 0  # persistent: it outlives the browser's session
    restarted = browser.new_context(storage_state=state)
    try:
        again, errors = open_page(restarted, site.base + href)
        expect(again.locator("#account-name")).to_have_text(name)
        expect(again.locator("#messages li.assistant")).to_have_count(1)
        assert errors == []
    finally:
        restarted.close()


def test_the_session_refreshes_the_providers_token_before_it_expires(
    site: Site, page: Page, screen: str
) -> None:
    """Within the margin before the provider's access token expires, the next request refreshes
    it with the refresh token (the stored expiry moves on, the old token not yet expired) and
    the person stays signed in."""
    name = f"refresh-{screen}@example.com"
    sign_in(page, site, name)
    settled_expiry = eventually(lambda: stable(lambda: site.access_expiry(name)))
    assert settled_expiry > utc_now()  # not expired: refreshed ahead of time
    page.get_by_role("button", name="Refresh memory").click()
    eventually(lambda: site.access_expiry(name) > settled_expiry or None)
    expect(page.locator("#account-name")).to_have_text(name)
    expect(page.locator("#sign-in")).to_be_hidden()


def test_a_session_past_its_lifetime_returns_the_page_to_sign_in(
    short_site: Site, page: Page, screen: str
) -> None:
    """A session lasts AUTH_SESSION_SECONDS: past its end the browser drops the cookie, the next
    request is 401 and the page returns to sign-in, saying why; the old cookie, replayed, is
    refused by the server too (and its row deleted)."""
    name = f"short-{screen}@example.com"
    sign_in(page, short_site, name)
    end = short_site.session_end(name)
    (cookie,) = [c for c in page.context.cookies() if c["name"] == "__Host-amem_session"]
    eventually(lambda: utc_now() > end or None, timeout=SHORT_SESSION_SECONDS + 5)
    page.get_by_role("button", name="Refresh memory").click()
    expect(page.locator("#sign-in")).to_be_visible()
    expect(page.locator("#sign-in-notice [role=alert]")).to_have_text(SESSION_ENDED)
    replayed = httpx.get(
        f"{short_site.base}/v1/memory", cookies={cookie["name"]: cookie["value"]}, timeout=10
    )
    assert replayed.status_code == 401
    assert short_site.session_rows(name) == []


def test_a_refresh_the_provider_refuses_ends_the_session(
    site: Site, page: Page, screen: str
) -> None:
    """When the provider no longer honours the refresh token (the person's tokens were revoked
    there), the session ends: the next request is 401, the page returns to sign-in and says
    why, and the session's row is gone."""
    name = f"revoked-{screen}@example.com"
    sign_in(page, site, name)
    site.provider.revoke(name)
    page.get_by_role("button", name="Refresh memory").click()
    expect(page.locator("#sign-in")).to_be_visible()
    expect(page.locator("#sign-in-notice [role=alert]")).to_have_text(SESSION_ENDED)
    assert site.session_rows(name) == []


def test_sign_out_in_one_tab_ends_the_session_everywhere(
    site: Site, browser: Browser, context: BrowserContext, page: Page, screen: str
) -> None:
    """Sign-out ends the session on the server and at the provider (its end-session page), the
    other tab shows the sign-in card at once, and a copy of the cookie taken before (a stolen
    cookie) is refused afterwards."""
    name = f"leaver-{screen}@example.com"
    sign_in(page, site, name)
    other, errors = open_page(context, site.base)
    expect(other.locator("#account-name")).to_have_text(name)
    stolen = context.cookies()

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(f"{site.provider.issuer}/oauth2/end_session**")
    assert "id_token_hint=" in page.url
    expect(other.locator("#sign-in")).to_be_visible()
    expect(other.locator("#sign-in-notice")).to_contain_text("You signed out in another tab.")
    expect(other.locator("#account-name")).to_have_text("")
    page.get_by_role("button", name="End session").click()
    page.wait_for_url(f"{site.base}/**")
    expect(page.locator("#sign-in")).to_be_visible()
    assert site.session_rows(name) == []
    assert errors == []

    thief = browser.new_context()
    try:
        thief.add_cookies(stolen)  # type: ignore[arg-type]
        taken, thief_errors = open_page(thief, site.base)
        expect(taken.locator("#sign-in")).to_be_visible()
        expect(taken.locator("#account-name")).to_have_text("")
        assert thief.request.get(f"{site.base}/v1/memory").status == 401
        assert thief_errors == []
    finally:
        thief.close()


def test_a_forged_cookie_and_a_forged_write_are_refused(
    site: Site, browser: Browser, page: Page, screen: str
) -> None:
    """A tampered session cookie signs nobody in (the page shows sign-in); a write that carries
    the real cookie without the session's CSRF token, or from another site, is refused 403 and
    changes nothing."""
    name = f"target-{screen}@example.com"
    sign_in(page, site, name)
    context = page.context
    request = context.request  # the browser's own cookie jar
    put = f"{site.base}/v1/memory/settings"
    for headers in ({}, {"x-csrf-token": "guessed"}, {"sec-fetch-site": "cross-site"}):
        refused = request.put(put, data={"save_mode": "ask"}, headers=headers)
        assert refused.status == 403, headers
        assert refused.json()["error"]["code"] == "csrf_refused"
    assert request.get(f"{site.base}/v1/memory/settings").json()["save_mode"] == "auto"

    (real,) = [c for c in context.cookies() if c["name"] == "__Host-amem_session"]
    forged = browser.new_context()
    try:
        value = real["value"]
        forged.add_cookies([{**real, "value": value[:-2] + ("AA" if value[-2:] != "AA" else "BB")}])  # type: ignore[list-item]
        shown, errors = open_page(forged, site.base)
        expect(shown.locator("#sign-in")).to_be_visible()
        assert httpx.get(f"{site.base}/v1/memory", cookies={real["name"]: "x"}).status_code == 401
        assert errors == []
    finally:
        forged.close()
