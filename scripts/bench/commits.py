"""Memory commit latency and throughput on PostgreSQL, with 1, 8 and 32 concurrent writers.

Two spreads: every writer on its own user, and every writer on one user (the contended case).
Each commit replaces the writer's own entry, so documents stay bounded. Retries are counted.

    .venv/bin/python scripts/bench/commits.py [--commits 200] [--url postgresql+psycopg://...]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.memory.rules import Operation  # noqa: E402
from app.memory.service import MemoryService  # noqa: E402
from scripts.bench._common import summary, write_results  # noqa: E402
from tests.support.databases import migrated_engine, postgres_database  # noqa: E402


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
    args = parser.parse_args()
    figures: dict[str, object] = {}
    with postgres_database() as url:
        engine = migrated_engine(url)
        service = MemoryService(engine)
        for spread in ("many_users", "one_user"):
            for writers in (1, 8, 32):
                per_writer = max(10, args.commits // max(1, writers // 4))
                row = run(service, writers, per_writer, shared_user=spread == "one_user")
                figures[f"{spread}/writers={writers}"] = row
                print(f"{spread:10s} writers={writers:2d} {row}", flush=True)
        engine.dispose()
    path = write_results("commits", figures)
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
