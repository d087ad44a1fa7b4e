"""The vectors and the embedding queue in the database: which messages wait, who holds them,
their vectors, and the nearest of one owner's.

Where a dialect stores vectors (`Backend`): PostgreSQL with pgvector in the `embedding` column
(cosine distance, an HNSW index per dimension); PostgreSQL without it and SQLite as float32 bytes,
compared per owner in numpy (the owner's vectors only: the cost grows with the person, not with
the table); MariaDB/MySQL and SQL Server not at all (search there stays lexical).

The queue is `amem_embedding_jobs`, filled from the transcript by `discover` (never by the turn:
its writes are unchanged) and claimed under a lease: `FOR UPDATE SKIP LOCKED` on PostgreSQL, the
write lock taken at BEGIN on SQLite, so two workers never hold the same message. A vector is
written only by the holder of its job's lease. Every function takes the caller's connection and
never commits.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import numpy as np
from sqlalchemy import (
    ColumnElement,
    Connection,
    Float,
    Select,
    and_,
    bindparam,
    cast,
    delete,
    exists,
    func,
    insert,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as postgres_insert
from sqlalchemy.types import UserDefinedType

from app.conversations.search import ANY_PROJECT
from app.db.schema import (
    PGVECTOR_COLUMN,
    PGVECTOR_INDEX,
    conversation_messages,
    conversations,
    embedding_jobs,
    message_embeddings,
)
from app.embeddings.owner_cache import Ids, OwnerVectors
from app.embeddings.vectors import Vector, from_rows, pgvector_literal, to_bytes

Backend = Literal["pgvector", "bytes", "none"]
messages, jobs, vectors = conversation_messages, embedding_jobs, message_embeddings
# A message committed after one with a higher id (two turns' transactions ending out of order)
# is found as long as it is within this many ids of the newest queued or embedded message;
# `python -m app embeddings backfill` finds any other.
LOOKBACK_IDS = 1_000


def embeddable() -> ColumnElement[bool]:
    """The one place that decides which messages are embedded (and so searched semantically):
    every message of a kept conversation, never one of a temporary chat (docs/privacy.md).
    Discovery, backfill and re-embedding all read this predicate over messages joined to their
    conversation, and `claim` reads it again before embedding."""
    return conversations.c.temporary.is_(False)


def backend(connection: Connection) -> Backend:
    dialect = connection.dialect.name
    if dialect == "sqlite":
        return "bytes"
    if dialect != "postgresql":
        return "none"
    column = connection.execute(
        text(
            "SELECT 1 FROM information_schema.columns "
            "WHERE table_name = :table AND column_name = :column "
            "AND table_schema = current_schema()"
        ),
        {"table": vectors.name, "column": PGVECTOR_COLUMN},
    ).scalar()
    return "pgvector" if column is not None else "bytes"


def pgvector_iterative(connection: Connection) -> bool:
    """Whether the installed pgvector filters during an index scan (0.8+): an owner's nearest are
    then found however few of the table's vectors are theirs."""
    version = connection.execute(
        text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    ).scalar()
    if version is None:
        return False
    parts = [int(part) for part in str(version).split(".")[:2] if part.isdigit()]
    return tuple(parts) >= (0, 8)


def index_name(dimensions: int) -> str:
    return f"{PGVECTOR_INDEX}_{int(dimensions)}"


def ensure_index(connection: Connection, dimensions: int) -> None:
    """pgvector's HNSW index (cosine) over the vectors of one size (an expression index: the
    column holds any size, so a model change needs no migration)."""
    size = int(dimensions)
    connection.execute(
        text(
            f"CREATE INDEX IF NOT EXISTS {index_name(size)} ON {vectors.name} "
            f"USING hnsw (({PGVECTOR_COLUMN}::vector({size})) vector_cosine_ops) "
            f"WHERE dimensions = {size}"
        )
    )


# -- the queue --------------------------------------------------------------------------------


def high_water(connection: Connection) -> int:
    """The newest message queued or embedded (0: none)."""
    newest = select(func.max(jobs.c.message_id)).scalar_subquery()
    embedded = select(func.max(vectors.c.message_id)).scalar_subquery()
    row = connection.execute(select(newest, embedded)).one()
    return max(int(row[0] or 0), int(row[1] or 0))


def pending(connection: Connection) -> int:
    return int(connection.execute(select(func.count()).select_from(jobs)).scalar() or 0)


def _insert_ignoring_duplicates(connection: Connection, rows: list[dict[str, Any]]) -> int:
    """Queue rows, skipping messages another worker queued meanwhile."""
    if not rows:
        return 0
    if connection.dialect.name == "postgresql":
        statement: Any = postgres_insert(jobs).on_conflict_do_nothing(index_elements=["message_id"])
    elif connection.dialect.name == "sqlite":
        statement = insert(jobs).prefix_with("OR IGNORE")
    else:
        statement = insert(jobs).prefix_with("IGNORE")
    counted = connection.execute(statement, rows).rowcount
    return len(rows) if counted is None or counted < 0 else counted  # psycopg's many: -1


def discover(
    connection: Connection, after_id: int, limit: int, model: str | None, now: datetime
) -> tuple[int, int]:
    """Queue up to `limit` embeddable messages after `after_id` that have no job and no vector
    of `model` (None: no vector at all), oldest first. Returns (how many were queued, the last
    message id looked at, or `after_id` when there was none)."""
    has_job = exists().where(jobs.c.message_id == messages.c.id)
    has_vector = exists().where(
        vectors.c.message_id == messages.c.id, *([vectors.c.model == model] if model else [])
    )
    found = connection.execute(
        select(messages.c.id, conversations.c.user_id)
        .select_from(messages.join(conversations, conversations.c.id == messages.c.conversation_id))
        .where(messages.c.id > after_id, embeddable(), ~has_job, ~has_vector)
        .order_by(messages.c.id)
        .limit(limit)
    ).all()
    rows = [
        {"message_id": int(row[0]), "user_id": row[1], "attempts": 0, "not_before": now}
        for row in found
    ]
    last = int(found[-1][0]) if found else after_id
    return _insert_ignoring_duplicates(connection, rows), last


@dataclass(frozen=True)
class Job:
    message_id: int
    user_id: str
    content: str
    attempts: int


def new_token() -> str:
    return str(uuid.uuid4())


def claim(
    connection: Connection, token: str, now: datetime, lease: timedelta, limit: int
) -> list[Job]:
    """Take up to `limit` due jobs nobody holds (or whose holder's lease ran out) under `token`
    until `now + lease`, counting the attempt. Others skip the rows this one locks."""
    free = (jobs.c.lease_until.is_(None)) | (jobs.c.lease_until < now)
    due = select(jobs.c.message_id).where(jobs.c.not_before <= now, free)
    due = due.order_by(jobs.c.not_before, jobs.c.message_id).limit(limit)
    if connection.dialect.name != "sqlite":
        due = due.with_for_update(skip_locked=True)
    ids = [int(value) for value in connection.execute(due).scalars()]
    if not ids:
        return []
    connection.execute(
        update(jobs)
        .where(jobs.c.message_id.in_(ids))
        .values(lease_token=token, lease_until=now + lease, attempts=jobs.c.attempts + 1)
    )
    rows = connection.execute(
        select(jobs.c.message_id, jobs.c.user_id, messages.c.content, jobs.c.attempts)
        .select_from(
            jobs.join(messages, messages.c.id == jobs.c.message_id).join(
                conversations, conversations.c.id == messages.c.conversation_id
            )
        )
        .where(jobs.c.message_id.in_(ids), jobs.c.lease_token == token, embeddable())
        .order_by(jobs.c.message_id)
    ).all()
    held = [Job(int(row[0]), str(row[1]), str(row[2]), int(row[3])) for row in rows]
    excluded = set(ids) - {job.message_id for job in held}
    if excluded:  # no longer embeddable: dropped from the queue
        connection.execute(delete(jobs).where(jobs.c.message_id.in_(sorted(excluded))))
    return held


def save(
    connection: Connection,
    token: str,
    made: Sequence[tuple[Job, Vector]],
    model: str,
    store: Backend,
    now: datetime,
) -> int:
    """Write the vectors of the jobs still held under `token` (a job whose lease expired and was
    taken by another worker is left to it), replacing a vector of another model. Returns how
    many were written."""
    written = 0
    for job, vector in made:
        taken = connection.execute(
            delete(jobs).where(jobs.c.message_id == job.message_id, jobs.c.lease_token == token)
        ).rowcount
        if not taken:
            continue
        connection.execute(delete(vectors).where(vectors.c.message_id == job.message_id))
        connection.execute(
            insert(vectors).values(
                message_id=job.message_id,
                user_id=job.user_id,
                model=model,
                dimensions=int(vector.shape[0]),
                vector=None if store == "pgvector" else to_bytes(vector),
                created_at=now,
            )
        )
        if store == "pgvector":
            connection.execute(
                text(
                    f"UPDATE {vectors.name} SET {PGVECTOR_COLUMN} = CAST(:v AS vector) "
                    "WHERE message_id = :id"
                ),
                {"v": pgvector_literal(vector), "id": job.message_id},
            )
        written += 1
    return written


def release(
    connection: Connection, token: str, held: Sequence[Job], now: datetime, delay: timedelta
) -> None:
    """Give failed jobs back, to be tried again after `delay`."""
    if not held:
        return
    connection.execute(
        update(jobs)
        .where(jobs.c.message_id.in_([job.message_id for job in held]), jobs.c.lease_token == token)
        .values(lease_token=None, lease_until=None, not_before=now + delay)
    )


def abandon(connection: Connection, token: str, held: Sequence[Job]) -> None:
    """Drop jobs that failed too often: their messages stay searchable by words (a later
    backfill queues them again)."""
    if held:
        connection.execute(
            delete(jobs).where(
                jobs.c.message_id.in_([job.message_id for job in held]),
                jobs.c.lease_token == token,
            )
        )


# -- the nearest of one owner's ---------------------------------------------------------------


def _owned(user_id: str, model: str, dimensions: int, project: str | None) -> ColumnElement[bool]:
    """The owner's vectors of `model`, read by their owner index (the owner was copied from the
    conversation when the message was queued; a conversation never changes owner). A project
    narrows them to its conversations' messages (a conversation can move between projects)."""
    conditions: list[Any] = [
        vectors.c.user_id == user_id,
        vectors.c.model == model,
        vectors.c.dimensions == dimensions,
    ]
    if project != ANY_PROJECT:
        conditions.append(vectors.c.message_id.in_(_scope_messages(user_id, project)))
    return and_(*conditions)


def _scope_messages(user_id: str, project: str | None) -> Select[Any]:
    """The ids of the owner's messages in a project (None: outside projects)."""
    in_project = (
        conversations.c.project_id.is_(None)
        if project is None
        else conversations.c.project_id == project
    )
    owned_conversations = select(conversations.c.id).where(
        conversations.c.user_id == user_id, in_project
    )
    return select(messages.c.id).where(messages.c.conversation_id.in_(owned_conversations))


EXCLUDED_ROOM = 4  # a turn has at most a few messages stored while it searches


def nearest(
    connection: Connection,
    store: Backend,
    user_id: str,
    query: Vector,
    model: str,
    limit: int,
    *,
    project: str | None = ANY_PROJECT,
    exclude_turn_id: str | None = None,
    iterative: bool = False,
    cache: OwnerVectors | None = None,
) -> list[tuple[int, float]]:
    """The owner's `limit` messages whose vectors (of `model`) are nearest to `query`, as
    (message id, cosine similarity), nearest first; `exclude_turn_id`'s messages left out.
    `cache` keeps the owner's vectors between searches (the bytes strategy)."""
    dimensions = int(query.shape[0])
    owned = _owned(user_id, model, dimensions, project)
    wanted = limit + (EXCLUDED_ROOM if exclude_turn_id is not None else 0)
    if store == "pgvector":
        found = _pgvector_nearest(connection, owned, query, wanted, iterative)
    elif cache is not None:
        found = _cached_nearest(connection, cache, user_id, model, project, query, wanted)
    else:
        found = _numpy_nearest(connection, owned, query, wanted)
    if exclude_turn_id is not None and found:
        excluded = set(
            connection.execute(
                select(messages.c.id).where(
                    messages.c.id.in_([message_id for message_id, _score in found]),
                    messages.c.turn_id == exclude_turn_id,
                )
            ).scalars()
        )
        found = [pair for pair in found if pair[0] not in excluded]
    return found[:limit]


def _read_vectors(
    connection: Connection, owned: ColumnElement[bool], dimensions: int
) -> tuple[Ids, Vector]:
    rows = connection.execute(select(vectors.c.message_id, vectors.c.vector).where(owned)).all()
    ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
    return ids, from_rows([row[1] for row in rows], dimensions)


def _best(ids: Ids, matrix: Vector, query: Vector, limit: int) -> list[tuple[int, float]]:
    if not len(ids):
        return []
    # One thread (numpy's own loop), not BLAS: OpenBLAS splits even this small product over
    # every core, and on a busy machine its threads waited for each other 15-240 ms where one
    # thread takes 1.5 ms (10,000 x 384).
    scores = np.einsum("ij,j->i", matrix, query)
    count = min(limit, len(ids))
    best = np.argpartition(-scores, count - 1)[:count]
    best = best[np.argsort(-scores[best], kind="stable")]
    return [(int(ids[index]), float(scores[index])) for index in best]


def _numpy_nearest(
    connection: Connection, owned: ColumnElement[bool], query: Vector, limit: int
) -> list[tuple[int, float]]:
    """Every one of the owner's vectors read and compared here (one matrix product)."""
    ids, matrix = _read_vectors(connection, owned, int(query.shape[0]))
    return _best(ids, matrix, query, limit)


def _cached_nearest(
    connection: Connection,
    cache: OwnerVectors,
    user_id: str,
    model: str,
    project: str | None,
    query: Vector,
    limit: int,
) -> list[tuple[int, float]]:
    """As `_numpy_nearest`, the owner's vectors kept by `cache`; a project's scope applied to
    them by the ids of its messages (read by index)."""
    dimensions = int(query.shape[0])
    every = _owned(user_id, model, dimensions, ANY_PROJECT)
    ids, matrix = cache.get(
        connection, user_id, model, dimensions, lambda: _read_vectors(connection, every, dimensions)
    )
    if project != ANY_PROJECT and len(ids):
        scope = connection.execute(_scope_messages(user_id, project)).scalars().all()
        keep = np.isin(ids, np.fromiter(scope, dtype=np.int64, count=len(scope)))
        ids, matrix = ids[keep], matrix[keep]
    return _best(ids, matrix, query, limit)


class PgVector(UserDefinedType[str]):
    """pgvector's `vector(N)`, for casts (the column itself is outside the metadata)."""

    cache_ok = True

    def __init__(self, size: int) -> None:
        self.size = int(size)

    def get_col_spec(self, **_kw: Any) -> str:
        return f"vector({self.size})"


def _pgvector_nearest(
    connection: Connection,
    owned: ColumnElement[bool],
    query: Vector,
    limit: int,
    iterative: bool,
) -> list[tuple[int, float]]:
    """pgvector's cosine distance (`<=>`). With iterative index scans (0.8+) the HNSW index is
    walked, filtering the owner's rows as it goes; before 0.8 an HNSW scan stops after
    ef_search candidates, most of them other people's, so the owner's vectors are compared
    exactly instead (their index by owner, the distance computed in the server)."""
    size = int(query.shape[0])
    column = cast(literal_column(f"{vectors.name}.{PGVECTOR_COLUMN}"), PgVector(size))
    target = cast(bindparam("query_vector", pgvector_literal(query)), PgVector(size))
    distance: ColumnElement[Any] = column.op("<=>", return_type=Float())(target)
    # `+ 0` is not the index's expression: the planner then reads the owner's rows (exact).
    order = distance if iterative else distance + literal_column("0")
    statement = (
        select(vectors.c.message_id, distance.label("distance"))
        .where(owned)
        .order_by(order)
        .limit(limit)
    )
    if iterative:
        # The owner's rows are filtered while the index is walked (pgvector 0.8).
        connection.execute(text("SET LOCAL hnsw.iterative_scan = relaxed_order"))
    rows = connection.execute(statement).all()
    ranked = sorted(((int(row[0]), 1.0 - float(row[1])) for row in rows), key=lambda r: -r[1])
    return ranked[:limit]
