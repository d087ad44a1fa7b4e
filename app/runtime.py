"""Everything one application instance owns: built in the lifespan, disposed at shutdown."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from sqlalchemy import Engine

from app.agent.agents import AgentRegistry
from app.api.auth import DevTokens, TokenVerifier, build_verifier
from app.conversations.service import ConversationService
from app.db.engine import build_engine
from app.memory.flags import FlagStore
from app.memory.service import MemoryService
from app.settings import Settings


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

    async def aclose(self) -> None:
        await self.agents.aclose()
        self.engine.dispose()


def build_runtime(
    settings: Settings, *, model_transport: httpx.AsyncBaseTransport | None = None
) -> Runtime:
    """Builds clients without connecting: the engine and the JWKS client connect on first use."""
    verifier, dev_tokens = build_verifier(settings)
    engine = build_engine(settings.database_url)
    return Runtime(
        settings=settings,
        engine=engine,
        memory=MemoryService(engine),
        flags=FlagStore(
            engine,
            default_memory=settings.memory_enabled,
            ttl_seconds=settings.flag_cache_seconds,
        ),
        verifier=verifier,
        dev_tokens=dev_tokens,
        # Agents are built lazily on first use; `model_transport` lets tests script the model.
        agents=AgentRegistry(settings, model_transport=model_transport),
        conversations=ConversationService(engine),
    )
