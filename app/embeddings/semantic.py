"""The query side of semantic search: the query's vector (a short, bounded wait), the owner's
nearest messages, and their fusion with the lexical ranking.

Nothing here can fail or slow a search beyond EMBEDDING_QUERY_TIMEOUT_SECONDS: an endpoint that
is down, slow or answers garbage (or vectors that cannot be read) leaves the lexical ranking as
the answer, counted by `amem_search_semantic_fallback_total{reason}`; after a failure the
endpoint is not asked again for RETRY_AFTER_SECONDS, so an outage costs one wait, not one per
search.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence

import structlog
from sqlalchemy import Connection, Engine, literal, select

from app.conversations.search import ANY_PROJECT, SearchHit
from app.db.schema import conversation_messages, conversations
from app.embeddings import store
from app.embeddings.client import EmbeddingClient, EmbeddingError
from app.embeddings.fusion import reciprocal_rank_fusion
from app.embeddings.owner_cache import OwnerVectors
from app.embeddings.vectors import Vector
from app.telemetry import metrics

log = structlog.get_logger(__name__)

RETRY_AFTER_SECONDS = 30.0
DENSE_CANDIDATES = 50  # the nearest messages fused with as many lexical ones
# The fusion's k: a list's first places weigh clearly more than its tenth (k 60 weighs them
# nearly alike). Measured on LoCoMo with EMBEDDING_FUSION_WEIGHT (docs/conversation-search.md).
FUSION_K = 10


class SemanticSearch:
    def __init__(
        self,
        client: EmbeddingClient,
        *,
        query_timeout_seconds: float,
        engine: Engine,
        fusion_weight: float = 1.0,
    ) -> None:
        self.client = client
        self.fusion_weight = fusion_weight  # the nearest list's vote against the words' (1)
        self.config = client.config
        self.query_timeout_seconds = query_timeout_seconds
        self._engine = engine
        self._failed_until = 0.0
        self._backend: store.Backend | None = None
        self._iterative = False
        self._lock = threading.Lock()
        self.owner_vectors = OwnerVectors()  # the bytes strategy's vectors between searches

    async def query_vector(self, query: str) -> Vector | None:
        """The query's vector, or None (counted) when the endpoint cannot give one in time."""
        if time.monotonic() < self._failed_until:
            metrics.semantic_fallback("recent_failure")
            return None
        try:
            [vector] = await self.client.embed([query], "query", seconds=self.query_timeout_seconds)
        except EmbeddingError as error:
            self._failed_until = time.monotonic() + RETRY_AFTER_SECONDS
            metrics.semantic_fallback(error.reason)
            log.warning("search.semantic_fallback", reason=error.reason)
            return None
        self._failed_until = 0.0
        return vector

    def _store(self, connection: Connection) -> store.Backend:
        with self._lock:
            if self._backend is None:
                self._backend = store.backend(connection)
                if self._backend == "pgvector":
                    self._iterative = store.pgvector_iterative(connection)
            return self._backend

    def nearest(
        self,
        user_id: str,
        vector: Vector,
        *,
        project: str | None = ANY_PROJECT,
        exclude_turn_id: str | None = None,
    ) -> list[int] | None:
        """The owner's nearest message ids, nearest first; None (counted) when unreadable."""
        try:
            with self._engine.connect() as connection:
                found = store.nearest(
                    connection,
                    self._store(connection),
                    user_id,
                    vector,
                    self.config.model,
                    DENSE_CANDIDATES,
                    project=project,
                    exclude_turn_id=exclude_turn_id,
                    iterative=self._iterative,
                    cache=self.owner_vectors,
                )
                connection.rollback()
        except Exception as error:
            metrics.semantic_fallback("store_error")
            log.warning("search.semantic_store_failed", error_type=type(error).__name__)
            return None
        return [message_id for message_id, _similarity in found]

    def hybrid(
        self,
        lexical: Sequence[SearchHit],
        user_id: str,
        vector: Vector,
        limit: int,
        *,
        project: str | None = ANY_PROJECT,
        exclude_turn_id: str | None = None,
    ) -> list[SearchHit]:
        """The lexical hits (ranked, up to DENSE_CANDIDATES of them) fused with the owner's
        nearest messages; the lexical hits alone when the vectors cannot be read."""
        dense = self.nearest(user_id, vector, project=project, exclude_turn_id=exclude_turn_id)
        if dense is None:
            return list(lexical[:limit])
        return fuse(lexical, dense, limit, self._hits(user_id), dense_weight=self.fusion_weight)

    def _hits(self, user_id: str) -> Callable[[list[int]], list[SearchHit]]:
        def fetch(ids: list[int]) -> list[SearchHit]:
            messages, owners = conversation_messages, conversations
            query = (
                select(
                    messages.c.id,
                    messages.c.conversation_id,
                    owners.c.title,
                    messages.c.role,
                    messages.c.content,
                    messages.c.created_at,
                    literal(0.0),
                )
                .select_from(messages.join(owners, owners.c.id == messages.c.conversation_id))
                .where(messages.c.id.in_(ids), owners.c.user_id == user_id)
            )
            with self._engine.connect() as connection:
                rows = connection.execute(query).all()
                connection.rollback()
            return [SearchHit(*row) for row in rows]

        return fetch

    async def aclose(self) -> None:
        await self.client.aclose()


def fuse(
    lexical: Sequence[SearchHit],
    dense: Sequence[int],
    limit: int,
    fetch: Callable[[list[int]], Sequence[SearchHit]],
    *,
    dense_weight: float = 1.0,
) -> list[SearchHit]:
    """The best `limit` of both rankings (reciprocal rank fusion, k FUSION_K, the dense list's
    votes weighted `dense_weight`), each scored by its fused score; `fetch` reads the hits
    that only the dense ranking found."""
    by_id = {hit.message_id: hit for hit in lexical}
    order = reciprocal_rank_fusion(
        [list(by_id), list(dense)], k=FUSION_K, weights=[1.0, dense_weight]
    )[:limit]
    missing = [message_id for message_id, _score in order if message_id not in by_id]
    if missing:
        by_id.update((hit.message_id, hit) for hit in fetch(missing))
    return [
        dataclasses.replace(by_id[message_id], score=score)
        for message_id, score in order
        if message_id in by_id
    ]
