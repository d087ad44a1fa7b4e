"""`python -m app embeddings backfill|reembed`: queue every stored message that lacks a vector
(backfill) or a vector of the configured model (reembed, after EMBEDDING_MODEL changed), and embed
them in this process, a queue's worth at a time, alongside any running server's workers (they
share the queue). Jobs still waiting for a retry when it ends are left to the servers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, delete, func, select

from app.concurrency import to_thread
from app.conversations.repository import now
from app.db.schema import conversation_messages, message_embeddings
from app.embeddings import store
from app.embeddings.client import EmbeddingConfig
from app.embeddings.worker import EmbeddingWorker
from app.settings import Settings


@dataclass
class Progress:
    queued: int = 0
    embedded: int = 0
    failed: int = 0
    waiting: int = 0  # jobs left for a retry when the command ended


async def backfill(
    worker: EmbeddingWorker,
    *,
    reembed: bool,
    report: Callable[[Progress], None],
    everything: bool = False,
) -> Progress:
    """Queue and embed until every message has a vector (of the configured model when
    `reembed`; `everything`: drop the configured model's vectors first, so all are made anew)."""
    engine: Engine = worker.engine
    model = worker.model if reembed else None
    if everything:
        await to_thread(_forget_model, worker)
    progress = Progress()
    cursor = 0
    exhausted = False

    def queue_page() -> tuple[int, int, bool]:
        """(queued, the new cursor, whether every message has been looked at)."""
        with worker.writing() as connection:
            room = worker.limits.queue_limit - store.pending(connection)
            if room <= 0:
                return 0, cursor, False
            queued, last = store.discover(connection, cursor, room, model, now())
            return queued, last, last == cursor

    def waiting() -> int:
        with engine.connect() as connection:
            return store.pending(connection)

    while True:
        if not exhausted:
            queued, cursor, exhausted = await to_thread(queue_page)
            progress.queued += queued
        while True:
            done = await worker.cycle()
            progress.embedded += done.embedded
            progress.failed += done.failed
            if done.embedded == 0 and done.failed == 0:
                break
            report(progress)
        if exhausted:
            break
    progress.waiting = await to_thread(waiting)
    report(progress)
    return progress


def _forget_model(worker: EmbeddingWorker) -> None:
    with worker.writing() as connection:
        vectors = message_embeddings
        connection.execute(delete(vectors).where(vectors.c.model == worker.model))


def status(engine: Engine, settings: Settings) -> dict[str, object]:
    """What `python -m app embeddings status` prints."""
    config = EmbeddingConfig.from_settings(settings)
    model = config.model if config else ""
    vectors = message_embeddings
    with engine.connect() as connection:

        def count(query: Any) -> int:
            return int(connection.execute(query).scalar() or 0)

        return {
            "storage": store.backend(connection),
            "model": model,
            "messages": count(select(func.count()).select_from(conversation_messages)),
            "vectors of this model": count(
                select(func.count()).select_from(vectors).where(vectors.c.model == model)
            ),
            "vectors of other models": count(
                select(func.count()).select_from(vectors).where(vectors.c.model != model)
            ),
            "queued": store.pending(connection),
        }
