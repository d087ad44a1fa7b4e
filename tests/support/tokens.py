"""Tokens for tests: dev HS256 tokens, asymmetric keys, and a live JWKS endpoint to rotate."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from app.identity.tokens import DEV_AUDIENCE, DEV_ISSUER

TEST_DEV_SECRET = "test-dev-secret-" + "0123456789abcdef" * 4  # 80 chars: fine for HS512 too
OIDC_ISSUER = "https://idp.example.test/"
OIDC_AUDIENCE = "agent-memory-api"


def claims(
    sub: str | None = "alice",
    roles: Iterable[str] = (),
    *,
    # Modules build their headers at import, when the whole suite is collected: a token must
    # outlive the longest run (CI's 90 minutes), not ten minutes of it.
    ttl: int = 3 * 3600,
    issuer: str = DEV_ISSUER,
    audience: str = DEV_AUDIENCE,
    **overrides: Any,
) -> dict[str, Any]:
    """A valid claim set; override or drop (value None) any claim to make it invalid."""
    now = int(time.time())
    values: dict[str, Any] = {
        "sub": sub,
        "roles": list(roles),
        "iss": issuer,
        "aud": audience,
        "iat": now,
        "nbf": now,
        "exp": now + ttl,
    }
    values.update(overrides)
    return {key: value for key, value in values.items() if value is not None}


def dev_token(
    sub: str = "alice",
    roles: Iterable[str] = (),
    *,
    secret: str = TEST_DEV_SECRET,
    **overrides: Any,
) -> str:
    return jwt.encode(claims(sub, roles, **overrides), secret, algorithm="HS256")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def dev_auth(sub: str = "alice", roles: Iterable[str] = (), **overrides: Any) -> dict[str, str]:
    """Headers with a valid dev token for `sub` (signed with TEST_DEV_SECRET)."""
    return bearer(dev_token(sub, roles, **overrides))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned_token(payload: Mapping[str, Any], header: Mapping[str, Any] | None = None) -> str:
    """An `alg: none` token (the classic bypass)."""
    head = {"alg": "none", "typ": "JWT", **(header or {})}
    return f"{_b64(json.dumps(head).encode())}.{_b64(json.dumps(payload).encode())}."


def hmac_token(payload: Mapping[str, Any], secret: bytes, header: Mapping[str, Any]) -> str:
    """An HS256 token signed with arbitrary bytes (e.g. a public key: algorithm confusion).

    Built by hand because PyJWT itself refuses to use a PEM public key as an HMAC secret.
    """
    head = {"alg": "HS256", "typ": "JWT", **header}
    signing_input = f"{_b64(json.dumps(head).encode())}.{_b64(json.dumps(payload).encode())}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(signature)}"


# -- asymmetric keys and a JWKS endpoint ------------------------------------------------------


@dataclass
class SigningKey:
    kid: str
    algorithm: str  # RS256 or ES256
    private_key: Any = field(repr=False)

    @classmethod
    def rsa(cls, kid: str) -> SigningKey:
        return cls(kid, "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048))

    @classmethod
    def ec(cls, kid: str) -> SigningKey:
        return cls(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))

    def public_jwk(self) -> dict[str, Any]:
        public = self.private_key.public_key()
        encoder = RSAAlgorithm if self.algorithm == "RS256" else ECAlgorithm
        jwk: dict[str, Any] = encoder.to_jwk(public, as_dict=True)
        jwk.update({"kid": self.kid, "use": "sig", "alg": self.algorithm})
        return jwk

    def public_pem(self) -> bytes:
        pem: bytes = self.private_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return pem

    def sign(self, payload: Mapping[str, Any], *, with_kid: bool = True) -> str:
        headers = {"kid": self.kid} if with_kid else None
        return jwt.encode(
            dict(payload), self.private_key, algorithm=self.algorithm, headers=headers
        )


def oidc_claims(
    sub: str | None = "alice", roles: Iterable[str] = (), **overrides: Any
) -> dict[str, Any]:
    return claims(sub, roles, issuer=OIDC_ISSUER, audience=OIDC_AUDIENCE, **overrides)


class JwksServer:
    """A JWKS document served over real HTTP on loopback; keys can be swapped at any time."""

    def __init__(self, keys: Iterable[SigningKey] = ()) -> None:
        self._keys = list(keys)
        self._lock = threading.Lock()
        self.fetches = 0
        self.available = True
        # Set `hold` to make fetches wait for `release`; `requested` is set when one arrives.
        self.hold = False
        self.requested = threading.Event()
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                server.requested.set()
                if server.hold:
                    server.release.wait(timeout=30)
                with server._lock:
                    server.fetches += 1
                    body = json.dumps({"keys": [key.public_jwk() for key in server._keys]})
                    status = 200 if server.available else 500
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *_args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/.well-known/jwks.json"

    def publish(self, *keys: SigningKey) -> None:
        with self._lock:
            self._keys = list(keys)

    @contextmanager
    def running(self) -> Iterator[JwksServer]:
        thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._httpd.shutdown()
            self._httpd.server_close()
            thread.join(timeout=10)
