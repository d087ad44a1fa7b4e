"""`python -m app embeddings backfill|reembed`: queue every stored message that lacks a vector
(backfill) or a vector of the configured model (reembed, after EMBEDDING_MODEL changed), and embed
them in this process, a queue's worth at a time, alongside any running server's workers (they
share the queue). Jobs still waiting for a retry when it ends are left to the servers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine

from app.concurrency import to_thread
from app.conversations.repository import now
from app.embeddings import store
from app.embeddings.worker import EmbeddingWorker


@dataclass
class Progress:
    queued: int = 0
    embedded: int = 0
    failed: int = 0
    waiting: int = 0  # jobs left for a retry when the command ended


async def backfill(
    worker: EmbeddingWorker, *, reembed: bool, report: Callable[[Progress], None]
) -> Progress:
    engine: Engine = worker.engine
    model = worker.model if reembed else None
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
