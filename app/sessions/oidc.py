"""The OpenID Connect relying party behind the browser sign-in: Authlib's client does the
protocol (discovery, the authorization request with state, nonce and PKCE S256, the code
exchange, the ID token's signature and claims, refresh, the end-session URL); this module only
says what the service needs from it and turns its answers into a subject, roles and tokens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
from authlib.integrations.httpx_client import AsyncOAuth2Client
from authlib.integrations.starlette_client import OAuth, OAuthError

from app.identity.tokens import Identity, identity_from_claims
from app.sessions.store import ProviderTokens
from app.settings import Settings

log = structlog.get_logger(__name__)

CALLBACK_PATH = "/auth/callback"
# Without `expires_in` the provider's token is taken to last this long (then refreshed).
DEFAULT_ACCESS_SECONDS = 300


class ProviderRefused(Exception):
    """The provider said no (a refused code or refresh token, an ID token that does not
    validate): the sign-in fails, or the session ends."""


class ProviderUnavailable(Exception):
    """The provider could not be asked (network, timeout, a broken answer): try again later."""


@dataclass(frozen=True)
class LoginStart:
    url: str
    state: str
    nonce: str
    code_verifier: str


@dataclass(frozen=True)
class SignedIn:
    identity: Identity
    tokens: ProviderTokens


class OidcLogin:
    """One provider, as configured (built in the lifespan; it fetches nothing until used)."""

    def __init__(self, settings: Settings) -> None:
        assert settings.auth_client_id is not None and settings.auth_public_url is not None
        secret = settings.auth_client_secret
        self.client_id = settings.auth_client_id
        self.client_secret = secret.get_secret_value() if secret is not None else None
        self.redirect_uri = settings.auth_public_url + CALLBACK_PATH
        self.post_logout_uri = settings.auth_public_url + "/"
        self.timeout = settings.auth_provider_timeout_seconds
        self.leeway = settings.auth_leeway_seconds
        discovery = settings.auth_discovery_url or (
            f"{(settings.auth_issuer or '').rstrip('/')}/.well-known/openid-configuration"
        )
        client_kwargs: dict[str, Any] = {
            "scope": settings.auth_scopes,
            "code_challenge_method": "S256",
            "timeout": self.timeout,
        }
        if self.client_secret is None:
            client_kwargs["token_endpoint_auth_method"] = "none"
        self.provider = OAuth().register(
            "provider",
            client_id=self.client_id,
            client_secret=self.client_secret,
            server_metadata_url=discovery,
            client_kwargs=client_kwargs,
        )

    async def start(self) -> LoginStart:
        """Where to send the browser, and the values its return must match."""
        try:
            made = await self.provider.create_authorization_url(self.redirect_uri)
        except Exception as error:
            raise self._unavailable("authorize", error) from None
        return LoginStart(
            url=made["url"],
            state=made["state"],
            nonce=made["nonce"],
            code_verifier=made["code_verifier"],
        )

    async def finish(self, code: str, *, nonce: str, code_verifier: str) -> SignedIn:
        """Exchange the code (with the PKCE verifier) and validate the ID token (signature
        against the provider's keys, issuer, audience, expiry, nonce, at_hash)."""
        try:
            token = await self.provider.fetch_access_token(
                redirect_uri=self.redirect_uri, code=code, code_verifier=code_verifier
            )
        except OAuthError as error:
            log.info("auth.code_refused", error=error.error)
            raise ProviderRefused("the provider refused the code") from None
        except Exception as error:
            raise self._unavailable("token", error) from None
        if "id_token" not in token:
            raise ProviderRefused("the provider sent no ID token")
        claims = await self._id_claims(token, nonce=nonce)
        return SignedIn(identity_from_claims(claims), self._tokens(token, None))

    async def refresh(self, refresh_token: str) -> SignedIn | ProviderTokens:
        """New tokens for a session; with a new ID token, who it names as well."""
        metadata = await self._metadata()
        client = AsyncOAuth2Client(
            client_id=self.client_id,
            client_secret=self.client_secret,
            token_endpoint_auth_method=None if self.client_secret else "none",
            timeout=self.timeout,
        )
        try:
            async with client:
                token = await client.refresh_token(
                    metadata["token_endpoint"], refresh_token=refresh_token
                )
        except OAuthError as error:
            log.info("auth.refresh_refused", error=error.error)
            raise ProviderRefused("the provider refused the refresh token") from None
        except Exception as error:
            raise self._unavailable("refresh", error) from None
        tokens = self._tokens(token, refresh_token)
        if "id_token" not in token:
            return tokens
        claims = await self._id_claims(token, nonce=None)
        return SignedIn(identity_from_claims(claims), tokens)

    async def logout_url(self, id_token: str | None) -> str | None:
        """The provider's end-session URL (RP-initiated logout), or None when it has none."""
        try:
            metadata = await self._metadata()
            if not metadata.get("end_session_endpoint"):
                return None
            made = await self.provider.create_logout_url(
                post_logout_redirect_uri=self.post_logout_uri,
                id_token_hint=id_token,
                client_id=self.client_id,
            )
        except ProviderUnavailable:
            return None  # the local session is gone all the same
        url: str = made["url"]
        return url

    async def _metadata(self) -> dict[str, Any]:
        try:
            metadata: dict[str, Any] = await self.provider.load_server_metadata()
        except Exception as error:
            raise self._unavailable("discovery", error) from None
        return metadata

    async def _id_claims(self, token: dict[str, Any], *, nonce: str | None) -> dict[str, Any]:
        try:
            claims = await self.provider.parse_id_token(token, nonce=nonce, leeway=self.leeway)
        except Exception as error:
            # joserfc's and Authlib's claim errors: a signature, issuer, audience, nonce or
            # expiry that does not check out. The type is logged, never the token.
            log.info("auth.id_token_refused", error=type(error).__name__)
            raise ProviderRefused("the ID token does not validate") from None
        if claims is None:
            raise ProviderRefused("the provider sent no ID token")
        return dict(claims)

    def _tokens(self, token: dict[str, Any], previous_refresh: str | None) -> ProviderTokens:
        expires_at = token.get("expires_at")
        if not isinstance(expires_at, int | float):
            expires_in = token.get("expires_in")
            seconds = expires_in if isinstance(expires_in, int | float) else DEFAULT_ACCESS_SECONDS
            expires_at = time.time() + seconds
        refresh = token.get("refresh_token")
        id_token = token.get("id_token")
        return ProviderTokens(
            access_expires_at=datetime.fromtimestamp(float(expires_at), UTC).replace(tzinfo=None),
            refresh_token=refresh if isinstance(refresh, str) and refresh else previous_refresh,
            id_token=id_token if isinstance(id_token, str) else None,
        )

    @staticmethod
    def _unavailable(step: str, error: Exception) -> ProviderUnavailable:
        log.warning("auth.provider_unavailable", step=step, error=type(error).__name__)
        return ProviderUnavailable(step)
