"""Token verification: dev HS256 tokens or OIDC tokens verified against a JWKS, to an `Identity`.

The verified `sub` claim is the only source of a memory owner; nothing here reads identity from
a body, a query or a tool argument. Below the composition root (app/runtime.py builds the
verifier) and the request edge (app/api/auth.py reads the bearer token).
"""

from __future__ import annotations

import time
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import jwt
import structlog
from jwt import PyJWKClient, PyJWKClientConnectionError, PyJWKClientError, PyJWKSetError

from app.concurrency import to_thread
from app.errors import ServiceUnavailable, Unauthorized
from app.settings import Settings

logger = structlog.get_logger(__name__)

DEV_ISSUER = "agent-memory-dev"
DEV_AUDIENCE = "agent-memory"
DEV_ALGORITHM = "HS256"
MAX_SUBJECT_CHARS = 128
OPERATOR_ROLE = "operator"


@dataclass(frozen=True)
class Identity:
    subject: str
    roles: frozenset[str] = frozenset()
    # The token's `exp` (epoch seconds), when it came from a token.
    expires_at: float | None = field(default=None, compare=False)


class InvalidToken(Unauthorized):
    code = "invalid_token"


class TokenVerifier(Protocol):
    async def verify(self, token: str) -> Identity: ...

    def keys_version(self) -> int:
        """Changes whenever the keys tokens are checked against may have changed."""
        ...


# -- claims to identity ---------------------------------------------------------------------

# Messages are constant: they never echo the token, its claims or the library's exception text.
_REJECTIONS: tuple[tuple[type[Exception], str, str], ...] = (
    (jwt.ExpiredSignatureError, "token_expired", "The token has expired."),
    (jwt.ImmatureSignatureError, "invalid_token", "The token is not valid yet."),
    (jwt.InvalidIssuerError, "invalid_token", "The token has the wrong issuer."),
    (jwt.InvalidAudienceError, "invalid_token", "The token has the wrong audience."),
    (jwt.InvalidSignatureError, "invalid_token", "The token signature does not verify."),
    (jwt.InvalidAlgorithmError, "invalid_token", "The token's algorithm is not accepted."),
    (jwt.MissingRequiredClaimError, "invalid_token", "The token lacks a required claim."),
    (jwt.DecodeError, "invalid_token", "The token is malformed."),
    (jwt.InvalidTokenError, "invalid_token", "The token is not valid."),
)


def rejection(error: Exception) -> InvalidToken:
    for kind, code, message in _REJECTIONS:
        if isinstance(error, kind):
            if isinstance(error, jwt.MissingRequiredClaimError):
                message = f"The token lacks the required claim {error.claim!r}."
            return InvalidToken(message, code=code)
    return InvalidToken("The token is not valid.")


# Control characters (C0, DEL, C1: NUL among them, which PostgreSQL cannot store in text) and
# lone surrogates (not text at all). Everything else is an opaque identifier: subjects are
# compared exactly, so a look-alike (a zero-width space, another script's "a") is simply
# another user, never a way into someone's memory.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cs"})


def subject_problem(subject: str) -> str | None:
    """Why `subject` cannot name a memory owner, or None when it can."""
    if not 1 <= len(subject) <= MAX_SUBJECT_CHARS:
        return f"must be 1 to {MAX_SUBJECT_CHARS} characters"
    if not subject.strip():
        return "must not be only whitespace"
    if any(unicodedata.category(character) in _REFUSED_CATEGORIES for character in subject):
        return "must not contain control characters or unpaired surrogates"
    return None


def identity_from_claims(claims: Mapping[str, Any]) -> Identity:
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise InvalidToken("The token has no subject ('sub').")
    problem = subject_problem(subject)
    if problem is not None:
        # The subject itself is never echoed: it may be anything an attacker chose.
        raise InvalidToken(f"The token subject ('sub') {problem}.")
    raw_roles = claims.get("roles")
    # A missing or odd `roles` claim grants nothing rather than failing the request.
    roles = (
        frozenset(role for role in raw_roles if isinstance(role, str))
        if isinstance(raw_roles, list)
        else frozenset()
    )
    expires = claims.get("exp")
    expires_at = float(expires) if isinstance(expires, int | float) else None
    return Identity(subject=subject, roles=roles, expires_at=expires_at)


# -- dev mode -------------------------------------------------------------------------------


class DevTokens:
    """Issues and verifies HS256 tokens with the dev secret (AUTH_MODE=dev only)."""

    def __init__(self, secret: str, *, ttl_seconds: int, leeway_seconds: int) -> None:
        self._secret = secret
        self.ttl_seconds = ttl_seconds
        self.leeway_seconds = leeway_seconds

    def issue(self, subject: str, roles: Iterable[str] = (), *, now: float | None = None) -> str:
        issued = int(time.time() if now is None else now)
        claims = {
            "sub": subject,
            "roles": sorted(set(roles)),
            "iss": DEV_ISSUER,
            "aud": DEV_AUDIENCE,
            "iat": issued,
            "nbf": issued,
            "exp": issued + self.ttl_seconds,
        }
        return jwt.encode(claims, self._secret, algorithm=DEV_ALGORITHM)

    def decode(self, token: str) -> Identity:
        try:
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=[DEV_ALGORITHM],
                issuer=DEV_ISSUER,
                audience=DEV_AUDIENCE,
                leeway=self.leeway_seconds,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.InvalidTokenError as error:
            raise rejection(error) from None
        return identity_from_claims(claims)

    async def verify(self, token: str) -> Identity:
        return self.decode(token)

    def keys_version(self) -> int:
        return 0  # the dev secret never changes


# -- oidc mode ------------------------------------------------------------------------------


class OidcVerifier:
    """RS256/ES256 tokens checked against the provider's JWKS, issuer, audience, exp and nbf."""

    def __init__(
        self,
        jwks: PyJWKClient,
        *,
        issuer: str,
        audience: str,
        algorithms: Iterable[str],
        leeway_seconds: int,
    ) -> None:
        self.jwks = jwks
        self.issuer = issuer
        self.audience = audience
        self.algorithms = tuple(algorithms)
        self.leeway_seconds = leeway_seconds

    async def verify(self, token: str) -> Identity:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as error:
            raise rejection(error) from None
        # Refuse `none`, HS* and anything unexpected before any key is fetched.
        if header.get("alg") not in self.algorithms:
            raise InvalidToken("The token's algorithm is not accepted.")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise InvalidToken("The token has no key id ('kid').")
        # PyJWKClient does blocking HTTP (and refetches on an unknown kid): keep it off the loop.
        try:
            key = await to_thread(self.jwks.get_signing_key, kid)
        except (PyJWKClientConnectionError, PyJWKSetError) as error:
            logger.warning("auth.jwks_unavailable", error=type(error).__name__)
            raise ServiceUnavailable(
                "The identity provider's keys cannot be fetched.", code="auth_unavailable"
            ) from None
        except PyJWKClientError:
            raise InvalidToken("The token was signed with an unknown key.") from None
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=list(self.algorithms),
                issuer=self.issuer,
                audience=self.audience,
                leeway=self.leeway_seconds,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.InvalidTokenError as error:
            raise rejection(error) from None
        return identity_from_claims(claims)

    def keys_version(self) -> int:
        return getattr(self.jwks, "fetches", 0)  # CountingJwksClient counts its fetches


class VerifiedTokens:
    """A verifier's answers, remembered: a token it accepted is accepted again from memory
    until `exp` (with the same leeway) and for at most `seconds` after it was verified, so a
    chat's many requests pay the signature, the claims and (with OIDC) the key lookup's thread
    hop once a minute instead of on every request. A refused token is never remembered. At
    most `size` tokens are held, the oldest forgotten first. Every answer is forgotten when the
    verifier's keys may have changed (`keys_version`: OIDC's JWKS fetches), so a retired key's
    tokens are refused as soon as the new set is fetched, as without this memory; an answer
    given while the keys changed is not remembered."""

    def __init__(
        self,
        inner: TokenVerifier,
        *,
        seconds: float,
        leeway_seconds: float,
        size: int = 4096,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.inner = inner
        self.seconds = seconds
        self.leeway_seconds = leeway_seconds
        self.size = size
        self._clock, self._wall = clock, wall_clock
        self._seen: OrderedDict[str, tuple[Identity, float, float]] = OrderedDict()
        self._keys = inner.keys_version()

    def keys_version(self) -> int:
        return self.inner.keys_version()

    async def verify(self, token: str) -> Identity:
        keys = self.inner.keys_version()
        if keys != self._keys:
            self._seen.clear()
            self._keys = keys
        seen = self._seen.get(token)
        if seen is not None:
            identity, until, expires = seen
            if self._clock() < until and self._wall() < expires:
                return identity
            del self._seen[token]
        identity = await self.inner.verify(token)
        if identity.expires_at is not None and self.inner.keys_version() == self._keys:
            self._seen[token] = (
                identity,
                self._clock() + self.seconds,
                identity.expires_at + self.leeway_seconds,
            )
            if len(self._seen) > self.size:
                self._seen.popitem(last=False)
        return identity


class CountingJwksClient(PyJWKClient):
    """PyJWKClient counting its fetches of the key set (each one may change the keys)."""

    fetches = 0

    def fetch_data(self) -> Any:
        data = super().fetch_data()
        self.fetches += 1
        return data


def build_jwks_client(settings: Settings) -> CountingJwksClient:
    """Constructing the client fetches nothing; the first token does."""
    assert settings.auth_jwks_url is not None
    return CountingJwksClient(
        settings.auth_jwks_url,
        cache_jwk_set=True,
        lifespan=settings.auth_jwks_cache_seconds,
        cooldown_duration=settings.auth_jwks_refresh_cooldown_seconds,
        timeout=settings.auth_jwks_timeout_seconds,
    )


def build_verifier(settings: Settings) -> tuple[TokenVerifier, DevTokens | None]:
    """The verifier for the configured mode (its answers remembered for
    AUTH_VERIFIED_CACHE_SECONDS), and the dev token issuer when in dev mode."""
    dev: DevTokens | None = None
    verifier: TokenVerifier
    if settings.auth_mode == "dev":
        if settings.auth_dev_secret is None:
            raise ValueError("AUTH_MODE=dev needs AUTH_DEV_SECRET (or its secret file)")
        verifier = dev = DevTokens(
            settings.auth_dev_secret.get_secret_value(),
            ttl_seconds=settings.auth_dev_token_ttl_seconds,
            leeway_seconds=settings.auth_leeway_seconds,
        )
    else:
        assert settings.auth_issuer is not None and settings.auth_audience is not None
        verifier = OidcVerifier(
            build_jwks_client(settings),
            issuer=settings.auth_issuer,
            audience=settings.auth_audience,
            algorithms=settings.auth_algorithms,
            leeway_seconds=settings.auth_leeway_seconds,
        )
    if settings.auth_verified_cache_seconds > 0:
        verifier = VerifiedTokens(
            verifier,
            seconds=settings.auth_verified_cache_seconds,
            leeway_seconds=settings.auth_leeway_seconds,
        )
    return verifier, dev
