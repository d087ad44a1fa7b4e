"""Memory commit latency and throughput on PostgreSQL, with 1, 8 and 32 concurrent writers.

Two spreads: every writer on its own user, and every writer on one user (the contended case).
Each commit replaces the writer's own entry, so documents stay bounded. Retries are counted.

    .venv/bin/python scripts/bench/commits.py [--commits 150] [--pool 36] [--out NAME]

To measure another commit's write path, run this same file from a checkout of that commit (it
imports the `app` next to it).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.db.engine import DatabaseLimits, build_engine  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.memory.rules import Operation  # noqa: E402
from app.memory.service import MemoryService  # noqa: E402
from scripts.bench._common import summary, write_results  # noqa: E402
from tests.support.databases import postgres_database  # noqa: E402


def run(service: MemoryService, writers: int, commits: int, shared_user: bool) -> dict[str, object]:
    latencies: list[float] = []
    retries = 0
    failures = 0
    reasons: dict[str, int] = {}
    lock = threading.Lock()
    start = threading.Barrier(writers + 1)

    def writer(index: int) -> None:
        nonlocal retries, failures
        user = f"bench-shared-{writers}" if shared_user else f"bench-{writers}-{index}"
        tag = f"writer {index:02d} counter"
        start.wait()
        for n in range(commits):
            operation = (
                Operation("memory", "add", content=f"{tag} {n}")
                if n == 0
                else Operation("memory", "replace", match=tag, content=f"{tag} {n}")
            )
            began = time.perf_counter()
            try:
                result = service.commit_operations(user, [[operation]])
            except Exception as error:
                with lock:
                    failures += 1
                    reasons[type(error).__name__ + ": " + str(error).splitlines()[0][:120]] = 1
                continue
            elapsed = (time.perf_counter() - began) * 1000
            with lock:
                latencies.append(elapsed)
                retries += result.retry_count

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    return {
        **summary(latencies),
        "commits_per_second": round(len(latencies) / wall, 1),
        "retries": retries,
        "failures": failures,
        "failure_reasons": sorted(reasons),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=150, help="commits per writer")
    parser.add_argument(
        "--pool", type=int, default=36, help="pooled connections (enough for every writer)"
    )
    parser.add_argument("--out", default="commits", help="results name")
    args = parser.parse_args()
    figures: dict[str, object] = {"pool_connections": args.pool}
    with postgres_database() as url:
        engine = build_engine(url, DatabaseLimits(pool_size=args.pool, pool_max_overflow=0))
        upgrade(engine)
        service = MemoryService(engine)
        for spread in ("many_users", "one_user"):
            for writers in (1, 8, 32):
                per_writer = max(10, args.commits // max(1, writers // 4))
                row = run(service, writers, per_writer, shared_user=spread == "one_user")
                figures[f"{spread}/writers={writers}"] = row
                print(f"{spread:10s} writers={writers:2d} {row}", flush=True)
        engine.dispose()
    single = figures["one_user/writers=1"]["p50_ms"]  # type: ignore[index]
    figures["one_user_goal_p99_ms"] = round(32 * single, 1)
    print(f"one user, 32 writers: goal p99 <= 32 x single-writer p50 = {32 * single:.1f} ms")
    path = write_results(args.out, figures)
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
