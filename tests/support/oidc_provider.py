"""A real OpenID provider for tests: PyPI's `oidc-provider-mock` (Authlib's authorization server
behind Flask, on a loopback port): discovery, JWKS, authorization code with PKCE, ID tokens,
refresh tokens, userinfo and an end-session endpoint; any client id is accepted, and a person
signs in by typing a `sub` into its form.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import httpx

with warnings.catch_warnings():
    # Its module imports Authlib's old `authlib.jose` (deprecated there, still supported).
    warnings.filterwarnings("ignore", "authlib.jose module is deprecated")
    import oidc_provider_mock

from app.settings import Settings
from tests.support.apps import api_settings

CLIENT_ID = "agent-memory-web"
CLIENT_SECRET = "client-secret-for-tests"
SESSION_SECRET = "session-secret-for-tests-" + "0123456789abcdef" * 2


@dataclass(frozen=True)
class Provider:
    issuer: str

    def revoke(self, subject: str) -> None:
        """The provider forgets every token it gave `subject` (as when a person is disabled)."""
        response = httpx.post(f"{self.issuer}/users/{quote(subject, safe='')}/revoke-tokens")
        assert response.status_code == 204, response.text

    def authorize(self, url: str, subject: str) -> str:
        """What the provider's form does when `subject` signs in: the redirect back."""
        response = httpx.post(url, data={"sub": subject})
        assert response.status_code in (302, 303), response.text
        return response.headers["location"]


@contextmanager
def running_provider(*, access_seconds: int = 3600) -> Iterator[Provider]:
    # The provider refuses plain http unless told this is a test; the variable is Authlib's.
    previous = os.environ.get("AUTHLIB_INSECURE_TRANSPORT")
    os.environ["AUTHLIB_INSECURE_TRANSPORT"] = "1"
    try:
        with oidc_provider_mock.run_server_in_thread(
            access_token_max_age=timedelta(seconds=access_seconds), require_nonce=True
        ) as server:
            yield Provider(f"http://localhost:{server.server_port}")
    finally:
        if previous is None:
            os.environ.pop("AUTHLIB_INSECURE_TRANSPORT", None)
        else:
            os.environ["AUTHLIB_INSECURE_TRANSPORT"] = previous


def provider_settings(
    database_url: str, provider: Provider, public_url: str, **overrides: Any
) -> Settings:
    """oidc mode against `provider`: Bearer tokens checked against its JWKS, and the browser
    sign-in with a confidential client."""
    values: dict[str, Any] = {
        "auth_mode": "oidc",
        "auth_dev_secret": None,
        "auth_jwks_url": f"{provider.issuer}/jwks",
        "auth_issuer": provider.issuer,
        "auth_audience": CLIENT_ID,
        "auth_client_id": CLIENT_ID,
        "auth_client_secret": CLIENT_SECRET,
        "auth_public_url": public_url,
        "auth_session_secret": SESSION_SECRET,
        "auth_cookie_secure": False,
    }
    values.update(overrides)
    return api_settings(database_url, **values)
