"""Routes: the browser's sign-in (backend-for-frontend). `/auth/login` and `/auth/callback` run
the OpenID Connect authorization-code flow with PKCE (oidc mode), `/auth/dev/login` signs in a
name (dev mode), `/auth/session` says who the cookie signs in (and hands the page its CSRF
token), `/auth/logout` ends the session here and, when it has one, at the provider.
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC
from typing import Annotated

import structlog
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse
from pydantic import BaseModel

from app.api.account.dev_tokens import DevTokenRequest
from app.api.deps import RuntimeDep, get_runtime
from app.api.errors import BODY_ERRORS, error_responses
from app.errors import NotFound, Unauthorized
from app.sessions.keys import session_hash
from app.sessions.oidc import ProviderRefused, ProviderUnavailable
from app.sessions.service import BrowserSessions, SessionEnded

log = structlog.get_logger(__name__)

router = APIRouter(tags=["sign-in"])

LOGIN_SECONDS = 600  # how long a started sign-in may take at the provider
FAILED = "/?sign_in=failed"


async def browser_sessions(request: Request) -> BrowserSessions:
    sessions = get_runtime(request).sessions
    if sessions is None:
        raise NotFound("Not Found")  # no browser sign-in in this configuration
    return sessions


Sessions = Annotated[BrowserSessions, Depends(browser_sessions)]


class SessionView(BaseModel):
    subject: str
    roles: list[str]
    expires_at: str
    csrf_token: str


def _view(
    sessions: BrowserSessions, value: str, subject: str, roles: frozenset[str], expires_at: object
) -> SessionView:
    moment = expires_at.replace(tzinfo=UTC).isoformat()  # type: ignore[attr-defined]
    return SessionView(
        subject=subject,
        roles=sorted(roles),
        expires_at=moment,
        csrf_token=sessions.keys.csrf_token(value),
    )


def _return_path(value: str | None) -> str:
    """A path on this site to come back to; anything else (another host, `//host`, a scheme)
    is the start page."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return "/"
    return value if all(32 < ord(character) < 127 for character in value) else "/"


async def _end_previous(request: Request, sessions: BrowserSessions) -> None:
    """A sign-in replaces the browser's cookie: the session it named ends with it."""
    previous = sessions.session_value(request)
    if previous is not None:
        await sessions.store.end(session_hash(previous))


@router.get("/auth/session", response_model=SessionView, responses=error_responses(401, 404))
async def current_session(request: Request, sessions: Sessions) -> Response:
    """Who the session cookie signs in, and the CSRF token the page sends with each write."""
    value = sessions.session_value(request)
    session = await sessions.live_session(value) if value else None
    if value is None or session is None:
        error = SessionEnded("No session: sign in.", code="no_session")
        response = JSONResponse(error.body(), status_code=401, headers=error.headers)
        if value is not None:
            sessions.clear_cookie(response)
        return response
    view = _view(sessions, value, session.subject, session.roles, session.expires_at)
    return JSONResponse(view.model_dump(), headers={"cache-control": "no-store"})


@router.post(
    "/auth/dev/login",
    response_model=SessionView,
    responses=error_responses(*BODY_ERRORS, 403, 404),
)
async def dev_login(
    body: DevTokenRequest, request: Request, runtime: RuntimeDep, sessions: Sessions
) -> Response:
    """Dev mode: any name signs in (the same rule as `POST /dev/token`), with the cookie."""
    if runtime.dev_tokens is None:
        raise NotFound("Not Found")
    sessions.check_same_site(request)
    await _end_previous(request, sessions)
    value, session = await sessions.store.create(body.sub, body.roles)
    view = _view(sessions, value, session.subject, session.roles, session.expires_at)
    response = JSONResponse(view.model_dump(), headers={"cache-control": "no-store"})
    sessions.set_cookie(response, value)
    return response


@router.get("/auth/login", status_code=303, responses=error_responses(404))
async def login(
    sessions: Sessions, next_path: Annotated[str | None, Query(alias="next")] = None
) -> Response:
    """Send the browser to the provider (state, nonce and a PKCE challenge); what its return
    must match travels in a short-lived encrypted cookie, not in any server's memory."""
    if sessions.oidc is None:
        raise NotFound("Not Found")
    try:
        start = await sessions.oidc.start()
    except ProviderUnavailable:
        return RedirectResponse("/?sign_in=unavailable", status_code=303)
    sealed = sessions.keys.seal(
        json.dumps(
            {
                "state": start.state,
                "nonce": start.nonce,
                "verifier": start.code_verifier,
                "next": _return_path(next_path),
            }
        )
    )
    response = RedirectResponse(start.url, status_code=303)
    response.set_cookie(
        sessions.cookies.login,
        sealed,
        max_age=LOGIN_SECONDS,
        path="/",
        secure=sessions.settings.auth_cookie_secure,
        httponly=True,
        samesite="lax",  # it must come back with the provider's top-level redirect
    )
    return response


@router.get("/auth/callback", status_code=303, responses=error_responses(404))
async def callback(
    request: Request,
    sessions: Sessions,
    code: str | None = None,
    state: str | None = None,
) -> Response:
    """The provider's answer: the code is exchanged and the ID token validated only for the
    browser that started this sign-in (its state cookie), then the session cookie is set."""
    if sessions.oidc is None:
        raise NotFound("Not Found")
    sealed = request.cookies.get(sessions.cookies.login)
    pending = sessions.keys.unseal(sealed, max_age_seconds=LOGIN_SECONDS) if sealed else None
    started = json.loads(pending) if pending else None
    target = FAILED
    response: Response
    if (
        started is None
        or code is None
        or state is None
        or not secrets.compare_digest(state.encode(), str(started["state"]).encode())
    ):
        log.info("auth.callback_refused", reason="state" if code else "no_code")
        response = RedirectResponse(target, status_code=303)
    else:
        try:
            signed_in = await sessions.oidc.finish(
                code, nonce=started["nonce"], code_verifier=started["verifier"]
            )
        except (ProviderRefused, Unauthorized):
            response = RedirectResponse(target, status_code=303)
        except ProviderUnavailable:
            response = RedirectResponse("/?sign_in=unavailable", status_code=303)
        else:
            identity = signed_in.identity
            await _end_previous(request, sessions)
            value, _session = await sessions.store.create(
                identity.subject, identity.roles, signed_in.tokens
            )
            response = RedirectResponse(_return_path(started["next"]), status_code=303)
            sessions.set_cookie(response, value)
            log.info("auth.signed_in", mode="oidc")
    response.delete_cookie(
        sessions.cookies.login,
        path="/",
        secure=sessions.settings.auth_cookie_secure,
        httponly=True,
        samesite="lax",
    )
    return response


class LogoutView(BaseModel):
    redirect_to: str


@router.post("/auth/logout", response_model=LogoutView, responses=error_responses(403, 404))
async def logout(request: Request, sessions: Sessions) -> Response:
    """Ends the session on the server (the cookie is worthless from now on, wherever a copy
    of it is) and clears it; `redirect_to` is the provider's end-session URL when it has one,
    else the start page."""
    sessions.check_same_site(request)
    value = sessions.session_value(request)
    redirect_to = "/"
    if value is not None:
        session = await sessions.store.find(value)
        if session is not None:
            sessions.check_csrf(request, value)
            await sessions.store.end(session.id_hash)
            if sessions.oidc is not None and session.provider is not None:
                redirect_to = await sessions.oidc.logout_url(session.provider.id_token) or "/"
            log.info("auth.signed_out")
    response = JSONResponse(LogoutView(redirect_to=redirect_to).model_dump())
    sessions.clear_cookie(response)
    return response
