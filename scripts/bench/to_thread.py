"""The database calls' thread hop, three ways side by side: `app.concurrency.to_thread` as it
is, anyio's `to_thread.run_sync` with a `CapacityLimiter`, and `asyncio.to_thread` on an
executor of the same size.

Each hop carries a call that holds the GIL for `--work-us` microseconds (about what a short
statement's Python costs) or nothing. At concurrency 1 a hop is awaited after the other; at
concurrency 32, 32 tasks hop at once. The ways run in alternating blocks (the order rotated
every block) in one event loop, so the machine's drift, other load included, reaches each
alike. Reported per way: the median over blocks of the wall time per hop and of the process's
CPU time per hop (the loop's thread and the workers').
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio.to_thread

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app import concurrency  # noqa: E402
from scripts.bench._common import write_results  # noqa: E402

Hop = Callable[[Callable[[], Any]], Awaitable[Any]]


def busy(microseconds: float) -> Callable[[], None]:
    """A call that holds the GIL for about `microseconds` (a spin on the clock)."""

    def call() -> None:
        end = time.perf_counter() + microseconds / 1e6
        while time.perf_counter() < end:
            pass

    return call


async def block(
    hop: Hop, call: Callable[[], Any], concurrency: int, hops: int
) -> tuple[float, float]:
    """Wall and CPU microseconds per hop over `hops` hops at `concurrency`."""
    per_task = max(1, hops // concurrency)

    async def worker() -> None:
        for _ in range(per_task):
            await hop(call)

    wall, cpu = time.perf_counter(), time.process_time()
    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())
    done = per_task * concurrency
    return (
        (time.perf_counter() - wall) / done * 1e6,
        (time.process_time() - cpu) / done * 1e6,
    )


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    concurrency.use_executor(ThreadPoolExecutor(max_workers=args.threads))
    limiter = anyio.CapacityLimiter(args.threads)
    ways: dict[str, Hop] = {
        "ours": lambda call: concurrency.to_thread(call),
        "anyio": lambda call: anyio.to_thread.run_sync(call, limiter=limiter),
        "asyncio": lambda call: asyncio.to_thread(call),
    }
    figures: dict[str, Any] = {}
    for work_us in args.work_us:
        call = busy(work_us) if work_us > 0 else (lambda: None)
        for level in args.concurrency:
            for hop in ways.values():  # warm-up: threads started, code paths hot
                await block(hop, call, level, args.hops // 4)
            samples: dict[str, dict[str, list[float]]] = {
                name: {"wall": [], "cpu": []} for name in ways
            }
            names = list(ways)
            for index in range(args.blocks):
                shift = index % len(names)
                for name in names[shift:] + names[:shift]:
                    wall, cpu = await block(ways[name], call, level, args.hops)
                    samples[name]["wall"].append(wall)
                    samples[name]["cpu"].append(cpu)
            row = {
                name: {
                    "wall_us_median": round(statistics.median(s["wall"]), 2),
                    "wall_us_min": round(min(s["wall"]), 2),
                    "wall_us_max": round(max(s["wall"]), 2),
                    "cpu_us_median": round(statistics.median(s["cpu"]), 2),
                    "blocks": len(s["wall"]),
                }
                for name, s in samples.items()
            }
            figures[f"work_{work_us:g}us_c{level}"] = row
            print(f"call of {work_us:g} µs, concurrency {level} (median of {args.blocks} blocks)")
            for name, r in row.items():
                print(
                    f"  {name:8} wall {r['wall_us_median']:8.1f} µs/hop "
                    f"(blocks {r['wall_us_min']:.1f}-{r['wall_us_max']:.1f}), "
                    f"CPU {r['cpu_us_median']:8.1f} µs/hop"
                )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=15, help="workers (pool size + overflow)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--work-us", type=float, nargs="+", default=[0, 100])
    parser.add_argument("--hops", type=int, default=2000, help="hops per block")
    parser.add_argument("--blocks", type=int, default=15, help="blocks per way")
    parser.add_argument("--out", default="to_thread")
    args = parser.parse_args()
    figures = asyncio.run(measure(args))
    figures["options"] = vars(args)
    print(f"written: {write_results(args.out, figures)}")


if __name__ == "__main__":
    main()
