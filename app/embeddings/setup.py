"""Semantic search as the runtime builds it: the client, the query side handed to the
conversation service, and the worker, or nothing at all (EMBEDDING_BASE_URL unset, or a database
without vector storage: MariaDB/MySQL and SQL Server stay lexical)."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import structlog
from sqlalchemy import Engine

from app.embeddings.client import EmbeddingClient, build_client
from app.embeddings.semantic import SemanticSearch
from app.embeddings.worker import EmbeddingWorker, WorkerLimits
from app.settings import Settings

log = structlog.get_logger(__name__)
VECTOR_DIALECTS = frozenset({"sqlite", "postgresql"})


@dataclass
class Embeddings:
    client: EmbeddingClient
    search: SemanticSearch
    worker: EmbeddingWorker | None  # None: EMBEDDING_WORKER=false (another process embeds)

    def start(self) -> None:
        if self.worker is not None:
            self.worker.start()

    async def aclose(self) -> None:
        if self.worker is not None:
            await self.worker.stop()
        await self.client.aclose()


def worker_limits(settings: Settings) -> WorkerLimits:
    return WorkerLimits(
        batch_size=settings.embedding_batch_size,
        queue_limit=settings.embedding_queue_limit,
        poll_seconds=settings.embedding_poll_seconds,
        timeout_seconds=settings.embedding_timeout_seconds,
    )


def build_embeddings(
    settings: Settings, engine: Engine, *, transport: httpx.AsyncBaseTransport | None = None
) -> Embeddings | None:
    """Built without connecting; `start` starts the worker (in a running event loop)."""
    if settings.embedding_base_url is None:
        return None
    if engine.dialect.name not in VECTOR_DIALECTS:
        log.warning("embeddings.unsupported_database", dialect=engine.dialect.name)
        return None
    client = build_client(settings, transport=transport)
    if client is None:
        return None
    search = SemanticSearch(
        client,
        query_timeout_seconds=settings.embedding_query_timeout_seconds,
        engine=engine,
        fusion_weight=settings.embedding_fusion_weight,
    )
    worker = (
        EmbeddingWorker(engine, client, worker_limits(settings))
        if settings.embedding_worker
        else None
    )
    return Embeddings(client=client, search=search, worker=worker)
