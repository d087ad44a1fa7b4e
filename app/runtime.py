"""Everything one application instance owns: built in the lifespan, disposed at shutdown."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

import httpx
from pydantic import SecretStr
from sqlalchemy import Engine

from app.agent.agents import AgentRegistry
from app.concurrency import drain_workers, use_executor
from app.conversations.service import ConversationService
from app.db import erasure_audit as audit
from app.db.admission import Admission, use_admission
from app.db.engine import DatabaseLimits, build_engine, database_limits
from app.embeddings.setup import Embeddings, build_embeddings
from app.erasure.service import ErasureService
from app.identity.tokens import DevTokens, TokenVerifier, build_verifier
from app.memory.control import MemoryControl
from app.memory.flags import FlagStore
from app.memory.service import MemoryService
from app.memory.writes import WriteLimits
from app.operators.limits import Caller, Limits, LimitStore
from app.operators.usage import UsageStore
from app.sessions.keys import SessionKeys
from app.sessions.oidc import OidcLogin
from app.sessions.service import BrowserSessions
from app.sessions.store import SessionStore
from app.settings import Settings
from app.telemetry import metrics


@dataclass
class Runtime:
    settings: Settings
    engine: Engine
    memory: MemoryService
    flags: FlagStore
    verifier: TokenVerifier
    dev_tokens: DevTokens | None  # set only in AUTH_MODE=dev
    agents: AgentRegistry
    conversations: ConversationService
    control: MemoryControl
    erasure: ErasureService
    limits: LimitStore
    usage: UsageStore
    embeddings: Embeddings | None = None  # semantic search (EMBEDDING_BASE_URL), else None
    # The browser sign-in's sessions (app/sessions/); None when the page cannot sign in.
    sessions: BrowserSessions | None = None

    def user_limits(self) -> Limits:
        return Limits(
            max_streams=self.settings.user_max_streams,
            turns_per_minute=self.settings.user_turns_per_minute,
            daily_tokens=self.settings.user_daily_tokens,
        )

    def download_limits(self) -> Limits:
        """A download (the export) holds one of the person's stream slots while it runs."""
        return Limits(
            max_streams=self.settings.user_max_streams,
            turns_per_minute=self.settings.user_turns_per_minute,
        )

    def eval_limits(self) -> Limits:
        return Limits(
            max_streams=self.settings.eval_max_streams,
            turns_per_minute=self.settings.eval_turns_per_minute,
        )

    def eval_caller(self) -> Caller:
        key = self.settings.eval_api_key
        return Caller.evaluator(key.get_secret_value() if key is not None else "")

    async def aclose(self) -> None:
        if self.embeddings is not None:
            await self.embeddings.aclose()
        await self.agents.aclose()
        # Calls still running end within their lease; their connections go back to the pool
        # that `dispose` then closes.
        await drain_workers(self.settings.db_operation_timeout_seconds)
        self.engine.dispose()


def build_runtime(
    settings: Settings, *, model_transport: httpx.AsyncBaseTransport | None = None
) -> Runtime:
    """Builds clients without connecting: the engine and the JWKS client connect on first use."""
    verifier, dev_tokens = build_verifier(settings)
    limits = database_limits(settings)
    engine = build_engine(settings.database_url, limits)
    metrics.watch_pool(engine)
    size_worker_threads(limits, settings)
    memory = build_memory_service(settings, engine)
    conversations = ConversationService(
        engine,
        search_config=settings.search_postgres_config,
        durable=settings.transcript_commit == "durable",
    )
    embeddings = build_embeddings(settings, engine)
    if embeddings is not None:
        conversations.semantic = embeddings.search
        if _in_event_loop():  # the lifespan: the worker runs beside the server
            embeddings.start()
    return Runtime(
        settings=settings,
        engine=engine,
        memory=memory,
        flags=FlagStore(
            engine,
            default_memory=settings.memory_enabled,
            ttl_seconds=settings.flag_cache_seconds,
            read_timeout_seconds=settings.flag_read_timeout_seconds,
        ),
        verifier=verifier,
        dev_tokens=dev_tokens,
        # Agents are built lazily on first use; `model_transport` lets tests script the model.
        agents=AgentRegistry(settings, model_transport=model_transport),
        conversations=conversations,
        control=MemoryControl(engine, page_rows=settings.export_page_rows),
        erasure=ErasureService(engine, memory, conversations),
        limits=LimitStore(
            engine,
            # A stream lasts at most its turn's deadline or STREAM_MAX_SECONDS (a slow reader,
            # the export) and the cleanup after it; a lease outliving that belongs to a worker
            # that died.
            lease_seconds=max(settings.turn_timeout_seconds, settings.stream_max_seconds)
            + LEASE_MARGIN_SECONDS,
            timeout_seconds=settings.limit_check_timeout_seconds,
            processes=settings.limits_replicas,
        ),
        usage=UsageStore(engine),
        embeddings=embeddings,
        sessions=build_sessions(settings, engine),
    )


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def build_sessions(settings: Settings, engine: Engine) -> BrowserSessions | None:
    """The browser sessions, when the page can sign people in (nothing is fetched yet)."""
    if not settings.browser_sign_in:
        return None
    secret = settings.auth_session_secret or settings.auth_dev_secret
    assert secret is not None  # settings validation (oidc) or the dev secret (dev)
    keys = SessionKeys(secret.get_secret_value())
    store = SessionStore(engine, keys, lifetime_seconds=settings.auth_session_seconds)
    oidc = OidcLogin(settings) if settings.auth_mode == "oidc" else None
    return BrowserSessions(settings, store, keys, oidc)


def build_memory_service(settings: Settings, engine: Engine) -> MemoryService:
    return MemoryService(
        engine,
        read_timeout_seconds=settings.memory_read_timeout_seconds,
        limits=write_limits(settings),
        erasure_key=erasure_key(settings),
    )


def erasure_key(settings: Settings) -> bytes:
    def secret(value: SecretStr | None) -> str | None:
        return value.get_secret_value() if value is not None else None

    return audit.hash_key(
        secret(settings.erasure_hash_key),
        telemetry=secret(settings.telemetry_hash_key),
        dev_secret=secret(settings.auth_dev_secret),
    )


LEASE_MARGIN_SECONDS = 60.0


def write_limits(settings: Settings) -> WriteLimits:
    return WriteLimits(
        history=settings.memory_history_limit,
        proposals=settings.memory_proposal_limit,
        proposal_ttl=timedelta(hours=settings.memory_proposal_ttl_hours),
        project_chars=settings.project_memory_chars,
        projects=settings.projects_max,
    )


def size_worker_threads(limits: DatabaseLimits, settings: Settings) -> None:
    """Give the running loop's database calls (`app.concurrency.to_thread`, and the loop's default
    executor) one worker thread per pooled connection.

    Database calls run on the loop's default executor, which Python sizes from the CPU count
    (min(32, CPUs + 4): six threads on a two-core host) whatever the pool holds. Fewer threads
    than connections queue work in front of idle connections, with no bound on that queue;
    more would only wait on the pool. Threads left behind by a deadline end within the lease
    (DB_OPERATION_TIMEOUT_SECONDS) or at once when their caller's fence breaks their connection.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # built outside an event loop (a script): nothing to size
        return
    use_executor(ThreadPoolExecutor(max_workers=limits.connections, thread_name_prefix="db-worker"))
    # One slot per worker thread: admitted work never waits in the executor's own queue, whose
    # wait would count against the deadlines meant for a database that hangs.
    use_admission(
        Admission(
            limits.connections,
            queue_limit=settings.db_queue_limit,
            wait_seconds=settings.db_queue_timeout_seconds,
        )
    )
