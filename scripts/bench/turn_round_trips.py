"""What one chat turn sends to the database: round trips, statements, transactions and pooled
checkouts per turn, counted rather than timed (other load on the machine does not move them).

    .venv/bin/python scripts/bench/turn_round_trips.py [--database postgresql|sqlite]
        [--turns 20] [--pooler transaction] [--out NAME]

The service runs in process (its lifespan included) against a private, migrated database, with
the benchmark's settings (`turn_overhead.py`: every per-user limit checked, memory on)
and the zero-delay stub model as a configured endpoint. The flag is cached for a minute, so that
its read every few seconds (FLAG_CACHE_SECONDS) stays out of the per-turn counts.
Four kinds of turn are counted, each over `--turns` turns after a warm-up: a new conversation
(`turn_overhead.py`'s turn), a turn continuing a conversation, a turn that saves a memory
entry, and a new conversation with memory switched off by its flag.

Round trips (PostgreSQL) come from libpq's protocol trace of every connection: each simple
`Query` or extended-protocol `Sync` the client sends waits for the server once (the checkout's
liveness ping included), and transactions are its BEGINs (a statement in autocommit is none).
Statements are SQLAlchemy's cursor events (the ping, BEGIN and COMMIT are not statements
there); on SQLite transactions are SQLAlchemy's commit and rollback events. Checkouts are the
pool's. Copied into another checkout, it counts
that checkout's turn (it imports the `app` next to it).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import Engine, event  # noqa: E402
from sqlalchemy.pool import Pool  # noqa: E402

from app.db.engine import build_engine  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.main import create_app  # noqa: E402
from app.settings import Settings  # noqa: E402
from scripts.bench._common import write_results  # noqa: E402
from scripts.bench._processes import BENCH_SECRET, dev_token, offline_model  # noqa: E402
from tests.support.databases import postgres_database  # noqa: E402

LIMITS_CHECKED = {
    "user_max_streams": 4,
    "user_turns_per_minute": 100_000,
    "user_daily_tokens": 10**12,
}
# psycopg prepares a statement on its fifth run on a connection (one more round trip), and the
# pool hands its connections out in turn: counted after this many turns, none is left to prepare.
WARM_UP = 30
KINDS = ("new conversation", "continued conversation", "memory saved", "memory off")


class Counts:
    """Everything the database saw, counted as it happens."""

    def __init__(self) -> None:
        self.statements: Counter[str] = Counter()
        # Statements SQLAlchemy compiled anew (not found in its compiled cache): each costs the
        # turn a compilation, far more CPU than executing a cached one.
        self.compiled = 0
        self.compiled_log: Counter[str] = Counter()  # for the last turn printed
        self.transactions = 0
        self.checkouts = 0
        self.traces: list[tuple[Any, Path]] = []
        self.log: list[str] = []  # the statements in order, for the last turn printed

    def traced(self) -> tuple[int, int]:
        """Over every traced connection so far: client messages that wait for the server, and
        the BEGINs among them (PostgreSQL's transactions; a statement in autocommit has none)."""
        waits = begins = 0
        for _connection, path in self.traces:
            with path.open() as lines:
                for line in lines:
                    fields = line.rstrip("\n").split("\t")
                    if "F" in fields:
                        kind, *body = fields[fields.index("F") + 2 :]
                        waits += kind in ("Query", "Sync")
                        begins += kind == "Query" and body[0].strip().startswith('"BEGIN')
        return waits, begins

    def snapshot(self) -> dict[str, int]:
        waits, begins = self.traced()
        figures = {
            "round_trips": waits,
            "statements": sum(self.statements.values()),
            "transactions": begins if self.traces else self.transactions,
            "checkouts": self.checkouts,
            "compiled": self.compiled,
        }
        return figures


def listen(counts: Counts, scratch: Path) -> None:
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        pgconn = getattr(dbapi_connection, "pgconn", None)
        if pgconn is None:
            return
        path = scratch / f"trace-{len(counts.traces)}"
        handle = path.open("w")
        pgconn.trace(handle.fileno())
        counts.traces.append((handle, path))

    def on_checkout(*_args: Any) -> None:
        counts.checkouts += 1

    def on_statement(_c: Any, _cur: Any, statement: str, *_rest: Any) -> None:
        words = " ".join(statement.split())
        counts.statements[words[:60]] += 1
        counts.log.append(words[:110])

    def on_executed(_c: Any, _cur: Any, statement: str, _p: Any, context: Any, _m: Any) -> None:
        cache_hit = getattr(context, "cache_hit", None)
        if cache_hit is not None and cache_hit != context.dialect.CACHE_HIT:
            counts.compiled += 1
            counts.compiled_log[" ".join(statement.split())[:110]] += 1

    def on_end(*_args: Any) -> None:
        counts.transactions += 1

    event.listen(Pool, "connect", on_connect)
    event.listen(Pool, "checkout", on_checkout)
    event.listen(Engine, "before_cursor_execute", on_statement)
    event.listen(Engine, "after_cursor_execute", on_executed)
    event.listen(Engine, "commit", on_end)
    event.listen(Engine, "rollback", on_end)


def settings(url: str, model: str, pooler: str) -> Settings:
    values: dict[str, Any] = {
        "database_url": url,
        "db_pooler": pooler,
        "auth_mode": "dev",
        "auth_dev_secret": BENCH_SECRET,
        "memory_enabled": True,
        "llm_base_url": model,
        "llm_api_key": "unused",
        "log_level": "WARNING",
        "flag_cache_seconds": 60,  # the flag read every few seconds left out: per turn only
        **LIMITS_CHECKED,
    }
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def turn(client: TestClient, token: str, message: str, conversation: str | None = None) -> str:
    """One turn read to its end; returns its conversation's id."""
    body: dict[str, Any] = {"message": message}
    if conversation is not None:
        body["conversation_id"] = conversation
    response = client.post("/v1/chat", json=body, headers={"Authorization": f"Bearer {token}"})
    text = response.text
    if response.status_code != 200 or "event: done" not in text or "event: error" in text:
        raise RuntimeError(f"the turn did not finish: {response.status_code} {text[-300:]!r}")
    start = text.index('"conversation_id"')
    return text[start:].split('"')[3]


def flag(client: TestClient, enabled: bool) -> None:
    """Switch memory on or off (the flag store's own write, as an operator would)."""
    runtime = client.app.state.runtime  # type: ignore[attr-defined]
    client.portal.call(runtime.flags.set, "memory", enabled, "bench")  # type: ignore[union-attr]


def count(client: TestClient, counts: Counts, kind: str, turns: int) -> dict[str, float]:
    token = dev_token(f"bench-trips-{kind.replace(' ', '-')}")
    conversation = turn(client, token, "hello there")
    remember = iter(range(10**6))

    def one() -> None:
        if kind == "continued conversation":
            turn(client, token, "hello there", conversation)
        elif kind == "memory saved":
            turn(client, token, f"remember that I keep note {next(remember)}")
        else:
            turn(client, token, "hello there")

    for _ in range(WARM_UP):  # every statement prepared on every pooled connection
        one()
    before = counts.snapshot()
    for _ in range(turns - 1):
        one()
    counts.log.clear()
    counts.compiled_log.clear()
    one()
    after = counts.snapshot()
    for statement, times in counts.compiled_log.items():
        print(f"  compiled anew in the last turn ({times}x): {statement}")
    print(f"\n{kind}: the statements of the last turn")
    for statement in counts.log:
        print(f"  {statement}")
    return {name: (after[name] - before[name]) / turns for name in after}


@contextlib.contextmanager
def database(kind: str, scratch: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{scratch / 'trips.db'}"
        return
    with postgres_database() as url:
        yield url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--pooler", choices=("none", "transaction"), default="none")
    parser.add_argument("--out", default=None, help="results file name (default: none written)")
    parser.add_argument("--keep-trace", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    figures: dict[str, Any] = {"database": args.database, "pooler": args.pooler}
    with tempfile.TemporaryDirectory() as directory:
        scratch = Path(directory)
        with database(args.database, scratch) as url, offline_model(scratch) as model:
            engine = build_engine(url)
            upgrade(engine)
            engine.dispose()
            counts = Counts()
            listen(counts, scratch)
            with TestClient(create_app(settings(url, model, args.pooler))) as client:
                for kind in KINDS:
                    if kind == "memory off":
                        flag(client, False)  # the process's cached flag changes with it
                    figures[kind] = count(client, counts, kind, args.turns)
            for handle, path in counts.traces:
                handle.close()
                if args.keep_trace is not None:
                    args.keep_trace.mkdir(parents=True, exist_ok=True)
                    (args.keep_trace / path.name).write_text(path.read_text())
    print(f"\nper turn ({args.database}, pooler {args.pooler}, root {Path.cwd()}):")
    for kind in KINDS:
        row = figures[kind]
        print(f"  {kind:24} " + "  ".join(f"{name} {value:.2f}" for name, value in row.items()))
    if args.out:
        write_results(args.out, figures)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
