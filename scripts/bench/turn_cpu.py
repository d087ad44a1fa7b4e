"""CPU time a turn costs the service process: a figure that other load on the machine barely
moves, unlike latency. Both processes of a turn are measured: the service (everything the
backend adds) and the stub model (the model's own share, the floor of the direct path).

    .venv/bin/python scripts/bench/turn_cpu.py --database sqlite [--turns 400]
        [--concurrency 1] [--root /path/to/another/checkout] [--out NAME]

Each process's user + system CPU comes from `/proc/<pid>/stat` before and after the timed
turns (after a warm-up), divided by the turns. With `--root` the service runs from another
checkout (the code before a change); run both and compare.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.bench._common import write_results  # noqa: E402
from scripts.bench._processes import (  # noqa: E402
    ROOT,
    dev_token,
    offline_model_process,
    service,
)
from scripts.bench.turn_overhead import (  # noqa: E402
    LIMITS_CHECKED,
    Samples,
    backend_turn,
    block,
    database,
)

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of `pid` (and its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


async def turns(url: str, count: int, concurrency: int) -> None:
    tokens = [dev_token(f"bench-cpu-{n}") for n in range(concurrency)]
    async with httpx.AsyncClient(timeout=60) as http:
        await block(lambda n: backend_turn(http, url, tokens[n], Samples()), count, concurrency)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default="sqlite")
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--root", type=Path, default=ROOT, help="the code tree to serve")
    parser.add_argument("--out", default=None, help="results file name (default: turn_cpu_<db>)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        with (
            database(args.database, directory, "cpu") as url,
            offline_model_process(directory) as (model_url, model),
            service(
                url,
                directory,
                args.root.resolve(),
                LLM_BASE_URL=model_url,
                LOG_LEVEL="INFO",
                **LIMITS_CHECKED,
            ) as (service_url, pid),
        ):
            asyncio.run(turns(service_url, 50, args.concurrency))  # warm-up
            before = cpu_seconds(pid), cpu_seconds(model), cpu_seconds(os.getpid())
            asyncio.run(turns(service_url, args.turns, args.concurrency))
            after = cpu_seconds(pid), cpu_seconds(model), cpu_seconds(os.getpid())
    service_ms, model_ms, client_ms = (
        (end - start) * 1000 / args.turns for start, end in zip(before, after, strict=True)
    )
    print(
        f"{args.turns} turns on {args.database} at concurrency {args.concurrency} "
        f"({args.root.resolve()}): service {service_ms:.2f} ms CPU per turn, "
        f"stub model {model_ms:.2f} ms, client {client_ms:.2f} ms"
    )
    write_results(
        args.out or f"turn_cpu_{args.database}",
        {
            "database": args.database,
            "turns": args.turns,
            "concurrency": args.concurrency,
            "root": str(args.root.resolve()),
            "service_cpu_ms_per_turn": round(service_ms, 3),
            "stub_model_cpu_ms_per_turn": round(model_ms, 3),
            "client_cpu_ms_per_turn": round(client_ms, 3),
        },
    )


if __name__ == "__main__":
    main()
