"""Conversation search latency on SQLite and PostgreSQL: one user's 100,000 messages among
1,000,000 in all (by default), queried through `ConversationService.search` (SQL, ranking and
snippets), one query at a time.

Messages are 12-30 words drawn from a 20,000-word vocabulary with Zipf-like frequencies, so
some words are in most messages and most words are rare. Queries come in classes by how often
their words occur: `rare`, `mid`, `common` (one word each), `two_words` (two mid words),
`prefix` (the first four letters of a mid word), `question` (a question naming a mid and a
common word among function words) and `three_words` (a rare, a mid and a common word); any
word may match and every match of the user's is ranked (BM25). Loading is bulk (executemany on
SQLite, COPY on PostgreSQL, with the indexes built after the load, as migrations 0006 and 0007
backfill).

    .venv/bin/python scripts/bench/search.py [--total 1000000] [--user 100000] [--queries 60]
                                             [--dialects sqlite,postgres] [--out search]
                                             [--explain 20]

`--out NAME` writes `results/NAME.json` (default `search`, the committed figures): give scratch
runs another name. `--explain N` also runs EXPLAIN (ANALYZE, BUFFERS) on PostgreSQL for the first
N queries of each class and reports the server's execution time (less noisy than the client's
wall-clock time on a shared machine) and the plan of the class's slowest query.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import psycopg  # noqa: E402
import pymysql  # noqa: E402
from sqlalchemy import Engine, text  # noqa: E402

from app.conversations.search import statement  # noqa: E402
from app.conversations.service import ConversationService  # noqa: E402
from app.db.engine import build_engine  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.db.schema import (  # noqa: E402
    SEARCH_BUCKETS,
    SEARCH_INDEX,
    postgres_bucket_index,
    postgres_bucket_indexes,
)
from scripts.bench._common import RESULTS, percentile, write_results  # noqa: E402
from tests.support.databases import (  # noqa: E402
    mariadb_database,
    migrated_engine,
    postgres_database,
)

USER = "bench-user"
PER_CONVERSATION = 100
VOCABULARY = 20_000
SYLLABLES = [c + v for c in "bcdfghjklmnprstvz" for v in "aeiou"]


def vocabulary(rng: random.Random) -> list[str]:
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < VOCABULARY:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def messages(
    total: int, own: int, words: list[str], rng: random.Random
) -> Iterator[tuple[str, str, str, str, str, datetime]]:
    """(user, conversation, turn, role, content, created_at) rows, conversation by conversation;
    the benchmark user's `own` messages are spread over the whole run."""
    weights = [1 / (rank + 1) for rank in range(len(words))]
    stamp = datetime(2026, 1, 1)
    stride = max(1, total // own)
    for conversation_index in range(total // PER_CONVERSATION):
        mine = conversation_index % stride == 0 and conversation_index // stride < own // (
            PER_CONVERSATION
        )
        user = USER if mine else f"other-{conversation_index % 5000}"
        conversation = str(uuid.uuid4())
        drawn = rng.choices(words, weights, k=PER_CONVERSATION * 30)
        for index in range(PER_CONVERSATION):
            stamp += timedelta(milliseconds=7)
            length = rng.randint(12, 30)
            content = " ".join(drawn[index * 30 : index * 30 + length])
            role = "user" if index % 2 == 0 else "assistant"
            yield user, conversation, str(uuid.uuid4()), role, content, stamp


def load(engine: Engine, rows: Iterator[tuple[str, str, str, str, str, datetime]]) -> int:
    """Bulk-load; on PostgreSQL the GIN indexes are dropped for the load and built after."""
    dialect = engine.dialect.name
    # A plain connection, outside the engine's guard (its operation deadline would break a
    # bulk load, which runs past it on purpose).
    mariadb = dialect in ("mysql", "mariadb")
    raw: Any = (
        psycopg.connect(
            engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        )
        if dialect == "postgresql"
        else pymysql.connect(
            host=engine.url.host,
            port=engine.url.port or 3306,
            user=engine.url.username,
            password=engine.url.password or "",
            database=engine.url.database,
            charset="utf8mb4",
        )
        if mariadb
        else sqlite3.connect(str(engine.url.database), isolation_level=None)
    )
    count = 0
    try:
        cursor = raw.cursor()
        if dialect == "postgresql":
            for bucket in range(SEARCH_BUCKETS):
                cursor.execute(f"DROP INDEX {postgres_bucket_index(bucket)}")
        elif mariadb:  # the FULLTEXT index built after the load, as migration 0006 builds it
            cursor.execute(f"ALTER TABLE amem_conversation_messages DROP INDEX {SEARCH_INDEX}")
        else:
            cursor.execute("BEGIN")  # the engine leaves pysqlite in autocommit mode
        mark = "%s" if dialect == "postgresql" or mariadb else "?"
        conversations: dict[str, tuple[str, datetime]] = {}
        batch: list[tuple[str, str, str, str, str, datetime]] = []

        def flush() -> None:
            if dialect == "postgresql":
                with cursor.copy(
                    "COPY amem_conversation_messages "
                    "(conversation_id, turn_id, role, content, status, created_at) FROM STDIN"
                ) as copy:
                    for _user, conv, turn, role, content, stamp in batch:
                        copy.write_row((conv, turn, role, content, "complete", stamp))
            else:
                cursor.executemany(
                    "INSERT INTO amem_conversation_messages "
                    "(conversation_id, turn_id, role, content, status, created_at) "
                    f"VALUES ({mark}, {mark}, {mark}, {mark}, 'complete', {mark})",
                    [(c, t, r, body, s) for _u, c, t, r, body, s in batch],
                )
            batch.clear()

        for row in rows:
            user, conversation, _turn, _role, content, stamp = row
            if conversation not in conversations:
                conversations[conversation] = (user, stamp)
                cursor.execute(
                    "INSERT INTO amem_conversations (id, user_id, title, created_at, updated_at) "
                    f"VALUES ({mark}, {mark}, {mark}, {mark}, {mark})",
                    (conversation, user, content[:80], stamp, stamp),
                )
            batch.append(row)
            count += 1
            if len(batch) >= 20_000:
                flush()
        flush()
        if dialect == "postgresql":
            for statement_text in postgres_bucket_indexes():
                cursor.execute(statement_text)
        raw.commit()
        if mariadb:
            cursor.execute(
                f"ALTER TABLE amem_conversation_messages ADD FULLTEXT INDEX {SEARCH_INDEX} "
                "(content), ALGORITHM=COPY"
            )
        with engine.begin() as connection:
            if not mariadb:
                connection.execute(text("ANALYZE"))
    finally:
        raw.close()
    return count


def stored_messages(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(
            connection.execute(text("SELECT count(*) FROM amem_conversation_messages")).scalar_one()
        )


def query_classes(words: list[str], rng: random.Random, n: int) -> dict[str, list[str]]:
    def pick(low: int, high: int) -> str:
        return words[rng.randrange(low, high)]

    return {
        "rare": [pick(8_000, VOCABULARY) for _ in range(n)],
        "mid": [pick(500, 3_000) for _ in range(n)],
        "common": [pick(20, 200) for _ in range(n)],
        "two_words": [f"{pick(300, 3_000)} {pick(300, 3_000)}" for _ in range(n)],
        "prefix": [pick(500, 3_000)[:4] for _ in range(n)],
        # Any word may match (ranked search): a question with function words, and three words
        # of different rarity, the common one matching hundreds of the user's messages.
        "question": [
            f"what did we say about {pick(500, 3_000)} and {pick(20, 200)}?" for _ in range(n)
        ],
        "three_words": [
            f"{pick(8_000, VOCABULARY)} {pick(500, 3_000)} {pick(20, 200)}" for _ in range(n)
        ],
    }


def measure(service: ConversationService, queries: dict[str, list[str]]) -> dict[str, Any]:
    for query in queries["mid"][:10]:  # warm the caches
        asyncio.run(service.search(USER, query, 10))
    figures: dict[str, Any] = {}
    every: list[float] = []
    every_cpu: list[float] = []
    for name, texts in queries.items():
        times: list[float] = []
        cpu: list[float] = []
        hits = 0
        for query in texts:
            began, began_cpu = time.perf_counter(), time.thread_time()
            hits += len(service._search(USER, query, 10, None))
            times.append((time.perf_counter() - began) * 1000)
            cpu.append((time.thread_time() - began_cpu) * 1000)
        every.extend(times)
        every_cpu.extend(cpu)
        figures[name] = {
            "n": len(times),
            "p50_ms": round(percentile(times, 0.5), 2),
            "p95_ms": round(percentile(times, 0.95), 2),
            "max_ms": round(max(times), 2),
            # This thread's CPU time (on SQLite the whole search's work, the database's too):
            # what a busy machine's waiting for a core does not add to.
            "cpu_p50_ms": round(percentile(cpu, 0.5), 2),
            "cpu_p95_ms": round(percentile(cpu, 0.95), 2),
            "mean_results": round(hits / len(texts), 1),
        }
    figures["all"] = {
        "n": len(every),
        "p50_ms": round(percentile(every, 0.5), 2),
        "p95_ms": round(percentile(every, 0.95), 2),
        "p99_ms": round(percentile(every, 0.99), 2),
        "cpu_p50_ms": round(percentile(every_cpu, 0.5), 2),
        "cpu_p95_ms": round(percentile(every_cpu, 0.95), 2),
    }
    return figures


def explain(engine: Engine, queries: dict[str, list[str]], count: int) -> dict[str, Any]:
    """The server's execution time of the search statement, per class, and the slowest plan."""
    figures: dict[str, Any] = {}
    with engine.connect() as connection:
        for name, texts in queries.items():
            times: list[float] = []
            slowest = ""
            for query in texts[:count]:
                compiled = statement("postgresql", USER, query, 10).compile(dialect=engine.dialect)
                rows = connection.exec_driver_sql(
                    f"EXPLAIN (ANALYZE, BUFFERS) {compiled}", compiled.params
                ).all()
                plan = "\n".join(str(row[0]) for row in rows)
                found = re.search(r"Execution Time: ([\d.]+) ms", plan)
                times.append(float(found.group(1)) if found else float("nan"))
                if times[-1] == max(times):
                    slowest = f"-- {query!r}\n{plan}"
            figures[name] = {
                "n": len(times),
                "p50_ms": round(percentile(times, 0.5), 2),
                "p95_ms": round(percentile(times, 0.95), 2),
                "slowest_plan": slowest,
            }
    return figures


@contextmanager
def database(
    dialect: str, sqlite_file: str | None = None, postgres_url: str | None = None
) -> Iterator[Engine]:
    if dialect == "sqlite" and sqlite_file:
        fresh = not Path(sqlite_file).exists()
        engine = build_engine(f"sqlite:///{sqlite_file}")
        if fresh:
            upgrade(engine)
        yield engine
        engine.dispose()
        return
    if dialect == "postgres" and postgres_url:
        engine = migrated_engine(postgres_url)
        yield engine
        engine.dispose()
        return
    if dialect == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            engine = build_engine(f"sqlite:///{folder}/bench.db")
            upgrade(engine)
            yield engine
            engine.dispose()
        return
    with mariadb_database() if dialect == "mariadb" else postgres_database() as url:
        engine = migrated_engine(url)
        yield engine
        engine.dispose()


def earlier(out: str, total: int, user: int) -> dict[str, Any]:
    """The other dialects' figures of an earlier run of the same sizes (kept in the file)."""
    try:
        figures = json.loads((RESULTS / f"{out}.json").read_text())["figures"]
    except (OSError, ValueError, KeyError):
        return {}
    if (figures.get("total_messages"), figures.get("user_messages")) != (total, user):
        return {}
    return {
        key: value for key, value in figures.items() if key in ("sqlite", "postgres", "mariadb")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=1_000_000)
    parser.add_argument("--user", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=60, help="per query class")
    parser.add_argument("--dialects", default="sqlite,postgres")
    parser.add_argument("--out", default="search", help="results/OUT.json (default: search)")
    parser.add_argument("--explain", type=int, default=0, help="EXPLAIN N queries per class")
    parser.add_argument(
        "--postgres-url",
        help="an existing (empty, or loaded by an earlier run) PostgreSQL database to use and keep",
    )
    parser.add_argument(
        "--sqlite-file",
        help="keep SQLite's database in this file; a file loaded by an earlier run is reused",
    )
    args = parser.parse_args()
    results: dict[str, Any] = {
        "total_messages": args.total,
        "user_messages": args.user,
        "goal_p95_ms": 50,
        **earlier(args.out, args.total, args.user),
    }
    for dialect in args.dialects.split(","):
        rng = random.Random(13)
        words = vocabulary(rng)
        reuse = (dialect == "sqlite" and args.sqlite_file and Path(args.sqlite_file).exists()) or (
            dialect == "postgres" and args.postgres_url
        )
        with database(dialect, args.sqlite_file, args.postgres_url) as engine:
            began = time.perf_counter()
            loaded = stored_messages(engine) if reuse else 0
            if not loaded:
                loaded = load(engine, messages(args.total, args.user, words, rng))
            load_seconds = time.perf_counter() - began
            # Their own generator, so a reused file gets the same queries as a fresh load.
            queries = query_classes(words, random.Random(17), args.queries)
            figures = measure(ConversationService(engine), queries)
            if args.explain and dialect == "postgres":
                figures["explain"] = explain(engine, queries, args.explain)
        results[dialect] = {
            "at": datetime.now().isoformat(timespec="seconds"),
            "loaded": loaded,
            "load_seconds": round(load_seconds, 1),
            **figures,
        }
        print(f"{dialect}: {loaded:,} messages loaded in {load_seconds:.0f} s")
        for name, row in figures.items():
            if name != "explain":
                print(
                    f"  {name:10} p50 {row['p50_ms']:7.2f} ms  p95 {row['p95_ms']:7.2f} ms  "
                    f"(CPU p50 {row['cpu_p50_ms']:6.2f}, p95 {row['cpu_p95_ms']:6.2f})"
                )
        for name, row in figures.get("explain", {}).items():
            print(f"  EXPLAIN {name:10} p50 {row['p50_ms']:7.2f} ms  p95 {row['p95_ms']:7.2f} ms")
        print("wrote", write_results(args.out, results))  # after each dialect: a run may stop


if __name__ == "__main__":
    main()
