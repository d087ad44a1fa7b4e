"""The statements and round trips of one PostgreSQL memory commit, and the client's CPU per commit.

One user's history is filled to its limit first, so the commit counted is the steady state
(it trims). Statements come from SQLAlchemy's cursor events; round trips from libpq's protocol
trace (each simple Query or extended-protocol Sync waits for the server), plus the checkout's
liveness ping, which runs before the trace starts.

    .venv/bin/python scripts/bench/commit_statements.py [--limit 20] [--commits 400]

Run it from another checkout to count that commit's write path (it imports the `app` next to it).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import event  # noqa: E402

from app.db.engine import DatabaseLimits, build_engine  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.memory.rules import Operation  # noqa: E402
from app.memory.service import MemoryService  # noqa: E402
from app.memory.writes import WriteLimits  # noqa: E402
from tests.support.databases import postgres_database  # noqa: E402

TAG = "bench counter"


def replace(n: int) -> list[list[Operation]]:
    return [[Operation("memory", "replace", match=TAG, content=f"{TAG} {n}")]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=20, help="MEMORY_HISTORY_LIMIT")
    parser.add_argument("--commits", type=int, default=400, help="commits in the CPU loop")
    args = parser.parse_args()
    with postgres_database() as url:
        engine = build_engine(url, DatabaseLimits(pool_size=2, pool_max_overflow=0))
        upgrade(engine)
        service = MemoryService(engine, limits=WriteLimits(history=args.limit))
        service.commit_operations("user", [[Operation("memory", "add", content=f"{TAG} 0")]])
        for n in range(1, args.limit + 10):  # the history full, every statement prepared
            service.commit_operations("user", replace(n))

        statements: list[str] = []
        trace = tempfile.NamedTemporaryFile("w+", suffix=".trace")  # noqa: SIM115
        tracing = [True]

        def on_statement(_c: Any, _cur: Any, statement: str, *_rest: Any) -> None:
            statements.append(" ".join(statement.split())[:100])

        def on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
            if tracing[0]:
                dbapi_connection.pgconn.trace(trace.fileno())

        def on_checkin(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.pgconn.untrace()

        event.listen(engine, "before_cursor_execute", on_statement)
        event.listen(engine, "checkout", on_checkout)
        event.listen(engine, "checkin", on_checkin)
        service.commit_operations("user", replace(0))
        tracing[0] = False
        event.remove(engine, "before_cursor_execute", on_statement)
        trace.flush()
        trace.seek(0)
        sent = [line.split("\t") for line in trace if "\tF\t" in line]
        waits = sum(1 for fields in sent if fields[3].split()[0] in ("Query", "Sync"))
        print(f"statements ({len(statements)}):")
        for statement in statements:
            print(f"  {statement}")
        print(f"round trips: {waits + 1} (the ping, then {waits} traced: BEGIN, ..., COMMIT)")

        cpu, wall = time.process_time(), time.perf_counter()
        for n in range(args.commits):
            service.commit_operations("user", replace(n))
        cpu_ms = (time.process_time() - cpu) / args.commits * 1000
        wall_ms = (time.perf_counter() - wall) / args.commits * 1000
        print(f"single writer: {wall_ms:.2f} ms per commit, client CPU {cpu_ms:.2f} ms")
        engine.dispose()


if __name__ == "__main__":
    main()
