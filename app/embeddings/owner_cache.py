"""The owners' stored vectors kept in memory between searches, for the bytes strategy (SQLite,
PostgreSQL without pgvector): reading a person's 10,000 vectors (15 MB at 384 dimensions) took
most of a hybrid search's time, the comparison itself about a millisecond.

Every search still asks the database whether the owner's vectors of the model changed: their
count and highest message id (an index read, no vector), and the matrix is read again when
either differs, or when it is older than MAX_AGE_SECONDS (a re-embedding under the same model
name keeps both). A vector deleted is seen as a smaller count; a message that went with it is no
result anyway (`fuse` reads every hit again, with its owner). The entries are bounded in bytes
(BUDGET_BYTES, least recently used out first): past it, searches read from the database as
before. One cache per `SemanticSearch` (one engine); a replica keeps its own.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from sqlalchemy import Connection, func, select

from app.db.schema import message_embeddings
from app.embeddings.vectors import Vector

BUDGET_BYTES = 64 * 1024 * 1024  # about four people of 10,000 messages at 384 dimensions
MAX_AGE_SECONDS = 60.0

Ids = npt.NDArray[np.int64]
Key = tuple[str, str, int]


@dataclass(frozen=True)
class _Entry:
    stamp: tuple[int, int]  # the count and the highest message id of the owner's vectors
    ids: Ids
    matrix: Vector
    loaded_at: float

    @property
    def size(self) -> int:
        return int(self.ids.nbytes + self.matrix.nbytes)


class OwnerVectors:
    def __init__(
        self,
        *,
        budget_bytes: int = BUDGET_BYTES,
        max_age_seconds: float = MAX_AGE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.budget_bytes = budget_bytes
        self.max_age_seconds = max_age_seconds
        self._clock = clock
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def get(
        self,
        connection: Connection,
        user_id: str,
        model: str,
        dimensions: int,
        load: Callable[[], tuple[Ids, Vector]],
    ) -> tuple[Ids, Vector]:
        """The owner's vectors of `model` (ids and matrix, row by row): kept ones while the
        database's count and highest id of them are unchanged, else `load`'s answer."""
        vectors = message_embeddings
        count, highest = connection.execute(
            select(func.count(), func.max(vectors.c.message_id)).where(
                vectors.c.user_id == user_id, vectors.c.model == model
            )
        ).one()
        stamp = (int(count), int(highest or 0))
        key = (user_id, model, dimensions)
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if (
                entry is not None
                and entry.stamp == stamp
                and now - entry.loaded_at < self.max_age_seconds
            ):
                self._entries.move_to_end(key)
                return entry.ids, entry.matrix
        ids, matrix = load()
        self._keep(key, _Entry(stamp, ids, matrix, now))
        return ids, matrix

    def _keep(self, key: Key, entry: _Entry) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._held -= old.size
            if entry.size > self.budget_bytes:
                return
            self._entries[key] = entry
            self._held += entry.size
            while self._held > self.budget_bytes:
                _key, evicted = self._entries.popitem(last=False)
                self._held -= evicted.size

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._held = 0
