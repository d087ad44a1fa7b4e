"""Issue 33's goals, read from `turn_overhead.py` results: each path's turn p50 over the floor at
concurrency 1 and its share of the floor's turns/s at 32 concurrent, next to the goal, the floor
with the required I/O and the code before, all from the same run.

    .venv/bin/python scripts/bench/goals.py \
        scripts/bench/results/turn_overhead_{sqlite,postgresql}_issue33_runU.json [--out NAME]

A run made with `--floor` (and, for its column, `--io-floor` and `--baseline`) is needed. The
table is printed as Markdown and its figures written to `results/<out>.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.bench._common import write_results  # noqa: E402

# (row, this code's path, the floor with the required I/O's path, the code before's path,
# goal at concurrency 1 in ms over the floor, goal at 32 as a share of the floor's turns/s)
PATHS = {
    "sqlite": [("SQLite", "backend", "io_floor", "baseline", 2.0, 0.8)],
    "postgresql": [
        ("PostgreSQL", "backend", "io_floor", "baseline", 4.0, 0.7),
        ("PgBouncer", "pgbouncer", "io_floor_pgbouncer", "baseline_pgbouncer", 4.0, 0.7),
    ],
}


def over_floor(level: dict[str, Any], path: str) -> float | None:
    if path not in level:
        return None
    return round(level[path]["turn"]["p50_ms"] - level["floor"]["turn"]["p50_ms"], 2)


def share(level: dict[str, Any], path: str) -> float | None:
    if path not in level:
        return None
    return round(level[path]["turns_per_second"] / level["floor"]["turns_per_second"], 2)


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    figures = results["figures"]
    database = "sqlite" if "on sqlite" in figures["setup"] else "postgresql"
    one, many = figures.get("concurrency=1"), figures.get("concurrency=32")
    found = []
    for name, now, io_floor, before, goal_ms, goal_share in PATHS[database]:
        if one is not None and "floor" in one and now in one:
            found.append(
                {
                    "row": f"{name}, concurrency 1 (ms over the floor)",
                    "floor": one["floor"]["turn"]["p50_ms"],
                    "io_floor": over_floor(one, io_floor),
                    "before": over_floor(one, before),
                    "now": over_floor(one, now),
                    "goal": goal_ms,
                    "met": over_floor(one, now) <= goal_ms,  # type: ignore[operator]
                }
            )
        if many is not None and "floor" in many and now in many:
            found.append(
                {
                    "row": f"{name}, 32 concurrent (share of the floor's turns/s)",
                    "floor": many["floor"]["turns_per_second"],
                    "io_floor": share(many, io_floor),
                    "before": share(many, before),
                    "now": share(many, now),
                    "goal": goal_share,
                    "met": share(many, now) >= goal_share,  # type: ignore[operator]
                }
            )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="turn_overhead.py result files")
    parser.add_argument("--out", default=None, help="results name (default: none written)")
    args = parser.parse_args()
    table = [row for path in args.results for row in rows(json.loads(path.read_text()))]
    print("| row | floor | floor + required I/O | before | **now** | goal | met |")
    print("|---|---|---|---|---|---|---|")
    for row in table:
        cells = [row["floor"], row["io_floor"], row["before"], f"**{row['now']}**", row["goal"]]
        shown = " | ".join("" if cell is None else str(cell) for cell in cells)
        print(f"| {row['row']} | {shown} | {'yes' if row['met'] else 'no'} |")
    if args.out:
        write_results(args.out, {"sources": [str(path) for path in args.results], "rows": table})


if __name__ == "__main__":
    main()
