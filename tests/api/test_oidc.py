"""OIDC identity against a JWKS served by the test: asymmetric keys only, rotation, caching."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from app.settings import Settings
from tests.support.apps import app_client, oidc_settings, served
from tests.support.tokens import (
    JwksServer,
    SigningKey,
    bearer,
    hmac_token,
    oidc_claims,
    unsigned_token,
)

RSA_KEY = SigningKey.rsa("rsa-1")
EC_KEY = SigningKey.ec("ec-1")
IMPOSTOR = SigningKey.rsa("rsa-1")  # same kid, different private key


@pytest.fixture
def jwks() -> Iterator[JwksServer]:
    with JwksServer([RSA_KEY, EC_KEY]).running() as server:
        yield server


@pytest.fixture
def settings(jwks: JwksServer, sqlite_url: str) -> Settings:
    return oidc_settings(sqlite_url, jwks.url)


def _status(client: httpx.Client, token: str) -> int:
    return client.get("/v1/memory", headers=bearer(token)).status_code


def test_rs256_and_es256_tokens_are_accepted(settings: Settings, jwks: JwksServer) -> None:
    """Tokens signed by a published RS256 or ES256 key, with the right iss/aud, authenticate;
    the JWKS is fetched once and then served from the cache, and nothing is fetched at start-up."""
    with app_client(settings) as client:
        assert jwks.fetches == 0
        assert _status(client, RSA_KEY.sign(oidc_claims("alice"))) == 200
        assert _status(client, EC_KEY.sign(oidc_claims("bob"))) == 200
        assert _status(client, RSA_KEY.sign(oidc_claims("carol"))) == 200
    assert jwks.fetches == 1


def _bad_tokens() -> list[tuple[str, str]]:
    now = int(time.time())
    good = oidc_claims("alice")
    return [
        ("expired", RSA_KEY.sign(oidc_claims(exp=now - 3600, iat=now - 7200, nbf=now - 7200))),
        ("not_yet_valid", RSA_KEY.sign(oidc_claims(nbf=now + 3600))),
        ("wrong_issuer", RSA_KEY.sign(oidc_claims(iss="https://evil.example/"))),
        ("wrong_audience", RSA_KEY.sign(oidc_claims(aud="another-api"))),
        ("missing_sub", RSA_KEY.sign(oidc_claims(sub=None))),
        ("sub_too_long", RSA_KEY.sign(oidc_claims("x" * 129))),
        ("missing_exp", RSA_KEY.sign(oidc_claims(exp=None))),
        ("wrong_signature_same_kid", IMPOSTOR.sign(good)),
        ("unknown_kid", SigningKey.ec("never-published").sign(good)),
        ("no_kid", RSA_KEY.sign(good, with_kid=False)),
        ("alg_none", unsigned_token(good, {"kid": "rsa-1"})),
        ("hs256_with_public_key", hmac_token(good, RSA_KEY.public_pem(), {"kid": "rsa-1"})),
        (
            "hs256_with_jwk_text",
            hmac_token(good, str(RSA_KEY.public_jwk()).encode(), {"kid": "rsa-1"}),
        ),
        ("ec_key_claims_rs256", hmac_token(good, b"x" * 32, {"kid": "ec-1", "alg": "RS256"})),
        ("garbage", "a.b.c"),
    ]


@pytest.mark.parametrize("transport", ["asgi", "http"])
def test_bad_oidc_tokens_are_401(transport: str, settings: Settings) -> None:
    """Expired, not-yet-valid, wrong issuer/audience, no sub, forged signatures, unknown keys,
    alg none and HS256 signed with the public key (algorithm confusion) are all 401."""
    cases = _bad_tokens()
    if transport == "asgi":
        with app_client(settings) as client:
            results = {
                case: client.get("/v1/memory", headers=bearer(token)) for case, token in cases
            }
    else:
        with served(settings) as url, httpx.Client(base_url=url) as client:
            results = {
                case: client.get("/v1/memory", headers=bearer(token)) for case, token in cases
            }
    for case, response in results.items():
        assert response.status_code == 401, (case, response.text)
        assert response.headers["www-authenticate"] == "Bearer", case
        assert response.json()["error"]["code"] in {"invalid_token", "token_expired"}, case


def test_key_rotation_is_picked_up_on_unknown_kid(settings: Settings, jwks: JwksServer) -> None:
    """A token from a key the provider has not published yet is refused; once the provider
    publishes it, the unknown kid triggers a refetch and the same token is accepted."""
    rotated = SigningKey.ec("ec-2")
    token = rotated.sign(oidc_claims("alice"))
    with app_client(settings) as client:
        assert _status(client, RSA_KEY.sign(oidc_claims("alice"))) == 200
        assert _status(client, token) == 401
        jwks.publish(rotated)  # the old keys are retired
        assert _status(client, token) == 200
        assert _status(client, RSA_KEY.sign(oidc_claims("alice"))) == 401


def test_unknown_kids_do_not_hammer_the_provider(jwks: JwksServer, sqlite_url: str) -> None:
    """Within the refresh cooldown, tokens with made-up kids cause no further JWKS fetches."""
    settings = oidc_settings(sqlite_url, jwks.url, auth_jwks_refresh_cooldown_seconds=600)
    with app_client(settings) as client:
        assert _status(client, RSA_KEY.sign(oidc_claims("alice"))) == 200
        for index in range(5):
            assert _status(client, SigningKey.ec(f"made-up-{index}").sign(oidc_claims())) == 401
    assert jwks.fetches == 1


def test_unreachable_jwks_is_503_not_401(jwks: JwksServer, settings: Settings) -> None:
    """When the provider's keys cannot be fetched, the caller gets 503 auth_unavailable (a
    server-side outage), and no memory is read."""
    jwks.available = False
    with app_client(settings) as client:
        response = client.get("/v1/memory", headers=bearer(RSA_KEY.sign(oidc_claims("alice"))))
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "auth_unavailable"


def test_dev_token_route_is_404_in_oidc_mode(settings: Settings) -> None:
    """POST /dev/token exists only in dev mode; dev HS256 tokens are refused in oidc mode."""
    from tests.support.tokens import dev_token

    with app_client(settings) as client:
        response = client.post("/dev/token", json={"sub": "alice"})
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
        assert _status(client, dev_token("alice")) == 401


def test_roles_claim_grants_operator(settings: Settings) -> None:
    """The `roles` claim (a list of strings) carries the operator role in oidc mode too."""
    with app_client(settings) as client:
        operator = RSA_KEY.sign(oidc_claims("op", ["operator"]))
        odd = RSA_KEY.sign({**oidc_claims("op"), "roles": "operator"})
        assert client.get("/v1/admin/flags", headers=bearer(operator)).status_code == 200
        assert client.get("/v1/admin/flags", headers=bearer(odd)).status_code == 403


async def test_jwks_fetch_does_not_block_the_event_loop(
    jwks: JwksServer, settings: Settings
) -> None:
    """While a JWKS fetch hangs, the server keeps answering other requests: the fetch runs in a
    worker thread, off the event loop."""
    jwks.hold = True
    token = RSA_KEY.sign(oidc_claims("alice"))
    with served(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            pending = asyncio.ensure_future(client.get("/v1/memory", headers=bearer(token)))
            assert await asyncio.to_thread(jwks.requested.wait, 30)
            assert (await client.get("/healthz")).status_code == 200
            assert not pending.done()
            jwks.release.set()
            assert (await pending).status_code == 200


def test_a_verified_token_is_not_verified_again_within_its_window(
    jwks: JwksServer, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the key set is fetched, a token's second and later requests skip the signing-key
    lookup (and its worker-thread hop); with AUTH_VERIFIED_CACHE_SECONDS=0 every request looks
    the key up. A refused token is looked up every time. (A verification during which the key
    set was fetched is not remembered: the first request of a process, here the warm-up.)"""
    from app.identity.tokens import CountingJwksClient

    lookups: list[str] = []
    original = CountingJwksClient.get_signing_key

    def counting(client: CountingJwksClient, kid: str) -> object:
        lookups.append(kid)
        return original(client, kid)

    monkeypatch.setattr(CountingJwksClient, "get_signing_key", counting)
    token = RSA_KEY.sign(oidc_claims("alice"))
    forged = IMPOSTOR.sign(oidc_claims("mallory"))
    for seconds, expected in ((60.0, 1), (0.0, 3)):
        lookups.clear()
        settings = oidc_settings(sqlite_url, jwks.url, auth_verified_cache_seconds=seconds)
        with app_client(settings) as client:
            assert _status(client, EC_KEY.sign(oidc_claims("warm-up"))) == 200
            lookups.clear()
            assert [_status(client, token) for _ in range(3)] == [200] * 3
            assert len(lookups) == expected
            assert [_status(client, forged) for _ in range(2)] == [401] * 2
            assert len(lookups) == expected + 2
