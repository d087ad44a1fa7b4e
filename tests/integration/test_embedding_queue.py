"""The embedding queue and the vectors, on SQLite, PostgreSQL without pgvector (bytes compared in
numpy), PostgreSQL 16 with pgvector (pgserver) and MariaDB (lexical only): the backlog survives a
restart and a dead worker's lease, two workers never embed one message twice, every delete path
removes vectors and jobs, a model change is re-embedded, and hybrid search finds a message that
the lexical search misses. The offline model's deterministic vectors stand in for a model."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import Engine, func, select, update

from app.conversations import repository
from app.conversations.search import ANY_PROJECT
from app.conversations.service import ConversationService
from app.db.schema import embedding_jobs, message_embeddings
from app.embeddings import store
from app.embeddings.backfill import backfill
from app.embeddings.client import build_client
from app.embeddings.owner_cache import OwnerVectors
from app.embeddings.semantic import SemanticSearch
from app.embeddings.setup import build_embeddings
from app.embeddings.vectors import to_bytes
from app.embeddings.worker import EmbeddingWorker, WorkerLimits
from app.erasure.retention import RetentionPolicy, purge
from app.memory.service import MemoryService
from app.offline.transport import EmbeddingsTransport
from app.settings import Settings, load_settings
from tests.support.databases import migrated_engine, wipe

__all__ = ["pgvector_url", "vector_url"]  # fixtures
from tests.support.embedding_servers import pgvector_url, vector_url


@pytest.fixture
def vector_engine(vector_url: str) -> Iterator[Engine]:
    """A migrated, emptied database that stores vectors."""
    engine = migrated_engine(vector_url)
    try:
        yield engine
    finally:
        engine.dispose()


class CountingTransport(EmbeddingsTransport):
    """The offline model in process, counting how often each text was embedded."""

    def __init__(self) -> None:
        self.texts: Counter[str] = Counter()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        import json

        body = json.loads(await request.aread())
        self.texts.update(body["input"])
        request.stream = httpx.ByteStream(json.dumps(body).encode())
        return await super().handle_async_request(request)


def settings(engine: Engine, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "database_url": engine.url.render_as_string(hide_password=False),
        "embedding_base_url": "offline",
        "embedding_batch_size": 4,
        "_env_file": None,
    }
    values.update(overrides)
    return load_settings(**values)


def worker(
    engine: Engine, transport: httpx.AsyncBaseTransport | None = None, **overrides: object
) -> EmbeddingWorker:
    resolved = settings(engine, **overrides)
    client = build_client(resolved, transport=transport or EmbeddingsTransport())
    assert client is not None
    limits = WorkerLimits(batch_size=resolved.embedding_batch_size, queue_limit=1000)
    return EmbeddingWorker(engine, client, limits)


def converse(engine: Engine, user: str, *texts: str, project_id: str | None = None) -> str:
    conversation_id = str(uuid.uuid4())
    with engine.begin() as connection:
        repository.create(connection, conversation_id, user, "chat", project_id=project_id)
        for index, content in enumerate(texts):
            role = "user" if index % 2 == 0 else "assistant"
            repository.add_message(
                connection, conversation_id, str(uuid.uuid4()), role, content, "complete"
            )
    return conversation_id


def count(engine: Engine, table: object, user: str | None = None) -> int:
    query = select(func.count()).select_from(table)  # type: ignore[arg-type]
    if user is not None:
        query = query.where(table.c.user_id == user)  # type: ignore[attr-defined]
    with engine.connect() as connection:
        return int(connection.execute(query).scalar() or 0)


async def drain(worker: EmbeddingWorker) -> None:
    for _ in range(100):
        done = await worker.cycle()
        if done.idle:
            return
    raise AssertionError("the worker never ran out of work")


def test_backlog_survives_a_restart_and_a_dead_workers_lease(vector_engine: Engine) -> None:
    """Messages queued by one worker are embedded by a new one after a restart; a batch a dead
    worker had claimed waits for its lease, then is embedded by another."""
    user = f"u-{uuid.uuid4().hex}"
    converse(vector_engine, user, *(f"message number {n} about sailing" for n in range(10)))

    async def scenario() -> None:
        first = worker(vector_engine)
        await asyncio.to_thread(first._discover, False)
        held = await asyncio.to_thread(first._claim)  # then it dies: nothing saved
        assert len(held) == 4
        second = worker(vector_engine)
        await drain(second)
        assert count(vector_engine, message_embeddings, user) == 6  # the held 4 wait
        with vector_engine.begin() as connection:  # the dead worker's lease runs out
            connection.execute(
                update(embedding_jobs).values(lease_until=repository.now() - timedelta(seconds=1))
            )
        await drain(second)
        await first.client.aclose()
        await second.client.aclose()

    asyncio.run(scenario())
    assert count(vector_engine, message_embeddings, user) == 10
    assert count(vector_engine, embedding_jobs) == 0


def test_two_workers_never_embed_the_same_message(vector_engine: Engine) -> None:
    """Two workers sharing the queue (each claim its own transaction, concurrently): every
    message is embedded exactly once."""
    user = f"u-{uuid.uuid4().hex}"
    texts = [f"note {n} on the harbour {uuid.uuid4().hex}" for n in range(40)]
    converse(vector_engine, user, *texts)
    transport = CountingTransport()

    async def scenario() -> None:
        workers = [worker(vector_engine, transport), worker(vector_engine, transport)]
        for _ in range(40):
            done = await asyncio.gather(*(one.cycle() for one in workers))
            if all(cycle.idle for cycle in done):
                break
        for one in workers:
            await one.client.aclose()

    asyncio.run(scenario())
    assert count(vector_engine, message_embeddings, user) == 40
    assert set(transport.texts) == set(texts)
    assert max(transport.texts.values()) == 1


def test_every_delete_removes_vectors_and_jobs(vector_engine: Engine) -> None:
    """Conversation delete, project delete, retention and erasure: the messages' vectors and
    queued jobs go with them; another person's stay."""
    person, other = f"p-{uuid.uuid4().hex}", f"o-{uuid.uuid4().hex}"
    memory = MemoryService(vector_engine)
    project = memory.create_project(person, "Boats")
    single = converse(vector_engine, person, "the red boat", "a fine boat")
    converse(vector_engine, person, "project boat plans", "noted", project_id=project.id)
    stale = converse(vector_engine, person, "an old boat story", "long ago")
    kept = converse(vector_engine, other, "the other person's boat", "theirs")
    conversations = ConversationService(vector_engine)

    async def embed_half() -> None:
        one = worker(vector_engine)
        await drain(one)  # everything embedded ...
        with vector_engine.begin() as connection:  # ... and some queued again
            store.discover(connection, 0, 1000, "another-model", repository.now())
        await one.client.aclose()

    asyncio.run(embed_half())
    assert count(vector_engine, message_embeddings, person) == 6
    assert count(vector_engine, embedding_jobs, person) == 6

    assert asyncio.run(conversations.delete(person, single))
    assert count(vector_engine, message_embeddings, person) == 4
    memory.delete_project(person, project.id, conversations="delete")
    assert count(vector_engine, message_embeddings, person) == 2
    with vector_engine.begin() as connection:  # the stale conversation, inactive for long
        from app.db.schema import conversations as table

        connection.execute(
            update(table)
            .where(table.c.id == stale)
            .values(updated_at=repository.now() - timedelta(days=400))
        )
    purge(
        vector_engine,
        memory,
        conversations,
        RetentionPolicy(conversation_days=30, history_days=0, batch_size=10),
    )
    assert count(vector_engine, message_embeddings, person) == 0
    assert count(vector_engine, embedding_jobs, person) == 0
    assert count(vector_engine, message_embeddings, other) == 2
    conversations.erase(other)
    assert count(vector_engine, message_embeddings) == 0
    assert count(vector_engine, embedding_jobs) == 0
    assert kept


def test_reembed_replaces_vectors_of_another_model(vector_engine: Engine) -> None:
    """After a model change, `reembed` makes a vector of the new model for every message;
    `backfill` leaves messages that have one of any model."""
    user = f"u-{uuid.uuid4().hex}"
    converse(vector_engine, user, "alpha", "beta", "gamma")

    async def scenario() -> None:
        old = worker(vector_engine, embedding_model="model-a", embedding_dimensions=256)
        await drain(old)
        new = worker(vector_engine, embedding_model="model-b", embedding_dimensions=256)
        idle = await backfill(new, reembed=False, report=lambda _p: None)
        assert idle.embedded == 0
        done = await backfill(new, reembed=True, report=lambda _p: None)
        assert done.embedded == 3
        for one in (old, new):
            await one.client.aclose()

    asyncio.run(scenario())
    with vector_engine.connect() as connection:
        models = connection.execute(select(message_embeddings.c.model)).scalars().all()
    assert models == ["model-b"] * 3


def test_hybrid_search_fuses_the_owners_nearest_with_the_lexical_ranking(
    vector_engine: Engine,
) -> None:
    """With vectors, a search returns the lexical hits fused with the owner's nearest messages
    (offline vectors: shared words, not meaning): the message sharing most words first, every
    lexical hit kept, no other person's message, fused scores best first."""
    user, other = f"u-{uuid.uuid4().hex}", f"o-{uuid.uuid4().hex}"
    converse(vector_engine, user, "we booked the lisbon flights for may", "great news")
    converse(vector_engine, user, "flights are expensive", "lisbon is sunny")
    converse(vector_engine, other, "lisbon flights cancelled in may", "sad")
    embeddings = build_embeddings(settings(vector_engine), vector_engine)
    assert embeddings is not None and embeddings.worker is not None
    conversations = ConversationService(vector_engine)

    async def scenario() -> tuple[list[int], list[tuple[int, str, float]]]:
        assert embeddings.worker is not None
        await drain(embeddings.worker)
        lexical = await conversations.search(user, "lisbon flights may", 10)
        conversations.semantic = embeddings.search
        hybrid = await conversations.search(user, "lisbon flights may", 10)
        await embeddings.aclose()
        return [hit.message_id for hit in lexical], [
            (hit.message_id, hit.snippet, hit.score) for hit in hybrid
        ]

    lexical, hybrid = asyncio.run(scenario())
    assert "booked" in hybrid[0][1]
    assert set(lexical) <= {message_id for message_id, _s, _f in hybrid}
    assert all("cancelled" not in text for _id, text, _f in hybrid)
    scores = [score for _id, _text, score in hybrid]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.mariadb
def test_mariadb_stays_lexical(mariadb_url: str) -> None:
    """MariaDB has no vector storage here: semantic search is not built, nothing is queued,
    and search answers by words as before."""
    engine = migrated_engine(mariadb_url)
    try:
        wipe(engine)
        user = f"u-{uuid.uuid4().hex}"
        converse(engine, user, "the lisbon flights", "ok")
        assert build_embeddings(settings(engine), engine) is None
        found = asyncio.run(ConversationService(engine).search(user, "lisbon", 5))
        assert len(found) == 1
        assert count(engine, embedding_jobs) == 0
    finally:
        engine.dispose()


def test_semantic_search_without_a_model_is_lexical(vector_engine: Engine) -> None:
    """Unset EMBEDDING_BASE_URL: nothing is built."""
    assert build_embeddings(settings(vector_engine, embedding_base_url=None), vector_engine) is None
    assert SemanticSearch  # the query side is only built with a model


def test_kept_owner_vectors_follow_every_change(vector_engine: Engine) -> None:
    """The bytes strategy's vectors kept between searches (`OwnerVectors`) give what a fresh
    read gives: after a message is embedded, after a conversation is deleted, within a project,
    and never another person's; a re-embedding under the same model name is read again once
    the entry is older than its age bound."""
    user, other = f"u-{uuid.uuid4().hex}", f"o-{uuid.uuid4().hex}"
    project = MemoryService(vector_engine).create_project(user, "Trips").id
    first = converse(vector_engine, user, "lisbon flights in may", "sunny lisbon")
    converse(vector_engine, user, "porto wine cellars", "lisbon trams", project_id=project)
    converse(vector_engine, other, "lisbon flights for someone else")
    now = [0.0]
    cache = OwnerVectors(max_age_seconds=60, clock=lambda: now[0])
    embeddings = build_embeddings(settings(vector_engine), vector_engine)
    assert embeddings is not None and embeddings.worker is not None
    semantic = embeddings.search
    query = asyncio.run(semantic.query_vector("lisbon flights"))
    assert query is not None

    def nearest(kept: bool, project_id: str | None = ANY_PROJECT) -> list[tuple[int, float]]:
        with vector_engine.connect() as connection:
            found = store.nearest(  # pgvector compares in the server: nothing is kept
                connection,
                store.backend(connection),
                user,
                query,
                semantic.config.model,
                10,
                project=project_id,
                cache=cache if kept else None,
            )
            connection.rollback()
        return [(message_id, round(score, 5)) for message_id, score in found]

    asyncio.run(drain(embeddings.worker))
    assert len(nearest(kept=True)) == 4
    assert nearest(kept=True) == nearest(kept=False)
    assert nearest(kept=True, project_id=project) == nearest(kept=False, project_id=project)
    assert nearest(kept=True, project_id=None) == nearest(kept=False, project_id=None)
    converse(vector_engine, user, "lisbon flights booked")  # a new vector: read again
    asyncio.run(drain(embeddings.worker))
    assert len(nearest(kept=True)) == 5 and nearest(kept=True) == nearest(kept=False)
    with vector_engine.begin() as connection:
        assert repository.remove(connection, user, first)
    assert len(nearest(kept=True)) == 3 and nearest(kept=True) == nearest(kept=False)
    with vector_engine.begin() as connection:  # the same ids and count, other vectors
        connection.execute(
            update(message_embeddings)
            .where(message_embeddings.c.user_id == user)
            .values(vector=to_bytes(-query))
        )
    now[0] = 61.0  # past the age bound: read again
    assert nearest(kept=True) == nearest(kept=False)
    asyncio.run(embeddings.aclose())
