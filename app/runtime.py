"""Everything one application instance owns: built in the lifespan, disposed at shutdown."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine

from app.api.auth import DevTokens, TokenVerifier, build_verifier
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

    async def aclose(self) -> None:
        self.engine.dispose()


def build_runtime(settings: Settings) -> Runtime:
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
    )
