"""The embedding worker: embeds committed messages in the background, off the turn's path.

Each cycle, in its own short transactions: queue new messages (`store.discover`, while the
queue holds fewer than EMBEDDING_QUEUE_LIMIT jobs: the backlog beyond it waits in the
transcript), claim a batch under this worker's lease, ask the endpoint for their vectors with no
transaction open, and write them (only those still held). A failed batch goes back with an
exponential backoff; a job that failed MAX_ATTEMPTS times is dropped (the message stays
searchable by words). The queue lives in the database, so a restart loses nothing and every
replica's worker shares it safely. One asyncio task per process, owned by the runtime.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import structlog
from sqlalchemy import Connection, Engine

from app.concurrency import to_thread
from app.conversations.repository import now
from app.db.engine import SQLITE_IMMEDIATE
from app.embeddings import store
from app.embeddings.client import EmbeddingClient, EmbeddingError
from app.embeddings.store import Job
from app.embeddings.vectors import Vector
from app.telemetry import metrics

log = structlog.get_logger(__name__)

MAX_ATTEMPTS = 8
BACKOFF_BASE_SECONDS = 2.0
BACKOFF_MAX_SECONDS = 600.0
LOOKBACK_EVERY_CYCLES = 30  # how often an idle worker looks back for late commits


def backoff(attempts: int) -> timedelta:
    """2, 4, 8... seconds (with a quarter of jitter) up to ten minutes."""
    seconds = min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2 ** max(0, attempts - 1))
    return timedelta(seconds=seconds * random.uniform(0.75, 1.0))  # noqa: S311 - not a secret


@dataclass(frozen=True)
class WorkerLimits:
    batch_size: int = 32
    queue_limit: int = 1000
    poll_seconds: float = 1.0
    timeout_seconds: float = 30.0

    @property
    def lease(self) -> timedelta:
        """Longer than one batch's request and writes can take."""
        return timedelta(seconds=2 * self.timeout_seconds + 30)


@dataclass
class Cycle:
    queued: int = 0
    embedded: int = 0
    failed: int = 0

    @property
    def idle(self) -> bool:
        return self.queued == 0 and self.embedded == 0 and self.failed == 0


class EmbeddingWorker:
    def __init__(self, engine: Engine, client: EmbeddingClient, limits: WorkerLimits) -> None:
        self.engine = engine
        self.client = client
        self.limits = limits
        self.token = store.new_token()  # this worker's lease
        self._backend: store.Backend | None = None
        self._cycles = 0
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    # -- one cycle ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def writing(self) -> Iterator[Connection]:
        """A short write transaction; on SQLite it takes the write lock at BEGIN, so two
        workers' claims queue up instead of failing on their first write."""
        with (
            self.engine.connect().execution_options(**{SQLITE_IMMEDIATE: True}) as connection,
            connection.begin(),
        ):
            yield connection

    def _prepare(self) -> store.Backend:
        if self._backend is None:
            with self.writing() as connection:
                self._backend = store.backend(connection)
                if self._backend == "pgvector":
                    store.ensure_index(connection, self.client.config.dimensions)
        return self._backend

    def _discover(self, look_back: bool) -> int:
        """Queue the messages after the newest queued or embedded one (the LOOKBACK_IDS before
        it too, when `look_back`), up to the queue's room."""
        with self.writing() as connection:
            room = self.limits.queue_limit - store.pending(connection)
            if room <= 0:
                return 0
            newest = store.high_water(connection)
            after = max(0, newest - store.LOOKBACK_IDS) if look_back else newest
            queued, _last = store.discover(
                connection, after, min(room, 4 * self.limits.batch_size), self.model, now()
            )
            return queued

    @property
    def model(self) -> str:
        return self.client.config.model

    def _claim(self) -> list[Job]:
        with self.writing() as connection:
            return store.claim(
                connection, self.token, now(), self.limits.lease, self.limits.batch_size
            )

    def _save(self, made: list[tuple[Job, Vector]], backend: store.Backend) -> int:
        with self.writing() as connection:
            return store.save(connection, self.token, made, self.model, backend, now())

    def _give_back(self, failed: list[Job]) -> None:
        dropped = [job for job in failed if job.attempts >= MAX_ATTEMPTS]
        retried = [job for job in failed if job.attempts < MAX_ATTEMPTS]
        with self.writing() as connection:
            store.abandon(connection, self.token, dropped)
            stamp = now()
            for job in retried:
                store.release(connection, self.token, [job], stamp, backoff(job.attempts))
        if dropped:
            metrics.embedding_jobs("abandoned", len(dropped))
        if retried:
            metrics.embedding_jobs("retried", len(retried))

    async def _embed(self, held: list[Job]) -> tuple[list[tuple[Job, Vector]], list[Job]]:
        """Vectors for the jobs; a batch the endpoint calls invalid is tried one by one, so one
        message it cannot take does not hold back the others."""
        timeout = self.limits.timeout_seconds
        try:
            vectors = await self.client.embed(
                [job.content for job in held], "document", seconds=timeout
            )
            return list(zip(held, vectors, strict=True)), []
        except EmbeddingError as error:
            if error.reason != "invalid" or len(held) == 1:
                log.warning("embeddings.batch_failed", reason=error.reason, jobs=len(held))
                return [], held
        made: list[tuple[Job, Vector]] = []
        failed: list[Job] = []
        for job in held:
            try:
                [vector] = await self.client.embed([job.content], "document", seconds=timeout)
                made.append((job, vector))
            except EmbeddingError:
                failed.append(job)
        return made, failed

    async def cycle(self, *, look_back: bool = False) -> Cycle:
        """Queue, claim, embed and save one batch."""
        backend = await to_thread(self._prepare)
        result = Cycle(queued=await to_thread(self._discover, look_back))
        held = await to_thread(self._claim)
        if not held:
            return result
        made, failed = await self._embed(held)
        if made:
            result.embedded = await to_thread(self._save, made, backend)
            metrics.embedding_jobs("embedded", result.embedded)
        if failed:
            await to_thread(self._give_back, failed)
            result.failed = len(failed)
        return result

    # -- the background task ------------------------------------------------------------------

    async def run(self) -> None:
        """Cycles until cancelled: at once while there is work, every EMBEDDING_POLL_SECONDS
        when idle; an error (the database away) waits a poll and goes on."""
        while not self._stopping.is_set():
            self._cycles += 1
            look_back = self._cycles % LOOKBACK_EVERY_CYCLES == 1
            try:
                done = await self.cycle(look_back=look_back)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("embeddings.cycle_failed", error_type=type(error).__name__)
                done = Cycle()
            if done.idle or done.failed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self.limits.poll_seconds)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(), name="embedding-worker")

    async def stop(self, grace_seconds: float = 5.0) -> None:
        """Let the current cycle end (its database work returns its connection before the
        engine is disposed), cancelling it past `grace_seconds`; a claimed batch it drops is
        taken again once its lease expires."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), grace_seconds)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
