"""Browser sessions at the request edge: the cookie, who it signs in, the refresh of the
provider's tokens before they expire, and CSRF protection of cookie-authenticated writes.

Only requests without an Authorization header are looked at here: a Bearer token (API,
OpenAI-compatible and MCP clients) is verified as before and is never subject to CSRF checks,
since a browser never attaches one on its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import timedelta

import structlog
from fastapi import Request, Response

from app.errors import Forbidden, ServiceUnavailable, Unauthorized
from app.identity.tokens import Identity
from app.sessions.keys import SessionKeys
from app.sessions.oidc import OidcLogin, ProviderRefused, ProviderUnavailable, SignedIn
from app.sessions.store import Session, SessionStore, utc_now
from app.settings import Settings

log = structlog.get_logger(__name__)

CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# What a browser says about where a request comes from (Fetch Metadata): anything else is a
# request another site made with this site's cookie.
SAME_SITE_FETCHES = frozenset({"same-origin", "none"})


class SessionEnded(Unauthorized):
    code = "session_ended"


class CsrfRefused(Forbidden):
    code = "csrf_refused"


@dataclass(frozen=True)
class CookieNames:
    session: str
    login: str

    @classmethod
    def for_settings(cls, settings: Settings) -> CookieNames:
        # `__Host-`: the browser keeps such a cookie only if it is Secure, for this host only
        # (no Domain) and for every path, so no sibling subdomain can plant or widen one.
        prefix = "__Host-" if settings.auth_cookie_secure else ""
        return cls(session=f"{prefix}amem_session", login=f"{prefix}amem_login")


class BrowserSessions:
    """Built in the lifespan when the page can sign people in (dev mode, or oidc with a client)."""

    def __init__(
        self, settings: Settings, store: SessionStore, keys: SessionKeys, oidc: OidcLogin | None
    ) -> None:
        self.settings = settings
        self.store = store
        self.keys = keys
        self.oidc = oidc
        self.cookies = CookieNames.for_settings(settings)
        self.margin = timedelta(seconds=settings.auth_refresh_margin_seconds)
        self._refreshing: dict[str, asyncio.Lock] = {}

    # -- the cookie ------------------------------------------------------------------------

    def session_value(self, request: Request) -> str | None:
        value = request.cookies.get(self.cookies.session)
        return value or None

    def set_cookie(self, response: Response, value: str) -> None:
        response.set_cookie(
            self.cookies.session,
            value,
            max_age=self.settings.auth_session_seconds,
            path="/",
            secure=self.settings.auth_cookie_secure,
            httponly=True,
            samesite=self.settings.auth_cookie_samesite,
        )

    def clear_cookie(self, response: Response) -> None:
        response.delete_cookie(
            self.cookies.session,
            path="/",
            secure=self.settings.auth_cookie_secure,
            httponly=True,
            samesite=self.settings.auth_cookie_samesite,
        )

    # -- who the cookie signs in -----------------------------------------------------------

    async def identify(self, request: Request) -> Identity | None:
        """The person the session cookie signs in, or None without a cookie. A cookie that
        names no live session is refused (401), and so is a write without the session's CSRF
        token or from another site (403)."""
        value = self.session_value(request)
        if value is None:
            return None
        session = await self.live_session(value)
        if session is None:
            raise SessionEnded("The session has ended. Sign in again.")
        if request.method not in SAFE_METHODS:
            self.check_csrf(request, value)
        return Identity(subject=session.subject, roles=session.roles)

    async def live_session(self, value: str) -> Session | None:
        session = await self.store.find(value)
        if session is None or not session.needs_refresh(utc_now(), self.margin):
            return session
        async with self._one_refresh(session.id_hash):
            return await self._refreshed(value)

    def check_csrf(self, request: Request, value: str) -> None:
        fetch_site = request.headers.get("sec-fetch-site")
        if fetch_site is not None and fetch_site not in SAME_SITE_FETCHES:
            log.info("auth.csrf_refused", reason="cross_site")
            raise CsrfRefused("A write from another site is refused.")
        token = request.headers.get(CSRF_HEADER)
        if not token or not self.keys.csrf_matches(value, token):
            log.info("auth.csrf_refused", reason="token")
            raise CsrfRefused("This write needs the session's CSRF token (X-CSRF-Token).")

    def check_same_site(self, request: Request) -> None:
        """For the sign-in and sign-out requests themselves (no session token yet, or one
        being ended): refused when the browser says another site sent them."""
        fetch_site = request.headers.get("sec-fetch-site")
        if fetch_site is not None and fetch_site not in SAME_SITE_FETCHES:
            raise CsrfRefused("A sign-in or sign-out from another site is refused.")

    # -- refresh ---------------------------------------------------------------------------

    @asynccontextmanager
    async def _one_refresh(self, id_hash: str) -> AsyncIterator[None]:
        # One refresh per session at a time in this process: a page's parallel requests would
        # otherwise spend a rotating refresh token twice, and the second would end the session.
        lock = self._refreshing.setdefault(id_hash, asyncio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and self._refreshing.get(id_hash) is lock:
                del self._refreshing[id_hash]

    async def _refreshed(self, value: str) -> Session | None:
        session = await self.store.find(value)  # again: another request may have refreshed it
        now = utc_now()
        if session is None or not session.needs_refresh(now, self.margin):
            return session
        provider = session.provider
        assert provider is not None
        if self.oidc is None or provider.refresh_token is None:
            if provider.access_expires_at > now:
                return session  # no way to refresh: it lasts until the provider's token ends
            await self._end(session, "no_refresh_token")
            return None
        try:
            answer = await self.oidc.refresh(provider.refresh_token)
        except ProviderRefused:
            again = await self.store.find(value)
            if again is not None and again.provider != provider:
                return again  # another replica refreshed it with the same token first
            await self._end(session, "refresh_refused")
            return None
        except ProviderUnavailable:
            if provider.access_expires_at > now:
                return session
            raise ServiceUnavailable(
                "The identity provider cannot be reached.", code="auth_unavailable"
            ) from None
        roles = None
        tokens = answer
        if isinstance(answer, SignedIn):
            if answer.identity.subject != session.subject:
                await self._end(session, "subject_changed")
                return None
            roles, tokens = answer.identity.roles, answer.tokens
        assert not isinstance(tokens, SignedIn)
        if tokens.id_token is None:  # most refreshes bring none: the sign-in's stays the hint
            tokens = replace(tokens, id_token=provider.id_token)
        await self.store.replace_tokens(session, tokens, roles)
        log.info("auth.session_refreshed")
        return await self.store.find(value)

    async def _end(self, session: Session, reason: str) -> None:
        log.info("auth.session_ended", reason=reason)
        await self.store.end(session.id_hash)
