"""CPU time a turn costs the service process: a figure that other load on the machine barely
moves, unlike latency. Both processes of a turn are measured: the service (everything the
backend adds) and the stub model (the model's own share, the floor of the direct path).

    .venv/bin/python scripts/bench/turn_cpu.py --database sqlite [--turns 400]
        [--concurrency 1] [--root /path/to/another/checkout] [--baseline /path/to/before]
        [--floor] [--io-floor] [--variants] [--setting NAME:KEY=VALUE,...] [--out NAME]

Each process's user + system CPU comes from `/proc/<pid>/stat` before and after the timed
turns (after a warm-up), divided by the turns; the client's too (this process), and on
PostgreSQL the database server's (every `postgres` process, and the server processes that ended
meanwhile), so that a turn's whole cost to the machine adds up. With `--root` the service runs
from another checkout; with `--baseline` another checkout (the code before a change) is served
too, in alternated blocks with this one. With `--floor` the floor app
(`scripts/bench/floor_app.py`, the required stack alone) is measured too, in `--blocks`
alternated blocks with the service: the service's CPU over the floor's is what its own work
costs. With `--io-floor` the floor app plus the database work every turn owes
(`scripts/bench/io_floor_app.py`) is measured the same way: the service's CPU over that one is
what its code costs beyond the required I/O. With `--variants` the service also runs with one
part of a turn switched off at a time (`VARIANTS`): the difference is what that part costs.
With `--setting` (repeatable) the service also runs with the settings given, under the name
given: `--setting pool4:DB_POOL_SIZE=4 --setting pool2:DB_POOL_SIZE=2`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.bench._common import write_results  # noqa: E402
from scripts.bench._processes import (  # noqa: E402
    ROOT,
    dev_token,
    floor_process,
    io_floor_service,
    offline_model_process,
    service,
)
from scripts.bench.turn_overhead import (  # noqa: E402
    LIMITS_CHECKED,
    LIMITS_OFF,
    Samples,
    backend_turn,
    block,
    database,
)

TICKS = os.sysconf("SC_CLK_TCK")
# `--variants`: the service with one part of a turn switched off by its setting, each on its own
# database; the difference from the whole service is what that part costs the process.
VARIANTS: dict[str, dict[str, str]] = {
    "without_limits": LIMITS_OFF,
    "without_stream_slots": {"USER_MAX_STREAMS": "0"},
    "without_memory": {"MEMORY_ENABLED": "false"},
    "without_info_logs": {"LOG_LEVEL": "WARNING"},
    "transcript_async_commit": {"TRANSCRIPT_COMMIT": "async"},
}


def setting_variant(text: str) -> tuple[str, dict[str, str]]:
    """`NAME:KEY=VALUE,KEY=VALUE` as (NAME, {KEY: VALUE})."""
    name, colon, pairs = text.partition(":")
    settings = dict(pair.split("=", 1) for pair in pairs.split(",") if "=" in pair)
    if not (name and colon and settings) or name in ("service", "baseline", "floor", "io_floor"):
        raise argparse.ArgumentTypeError(f"expected NAME:KEY=VALUE[,KEY=VALUE...], got {text!r}")
    return name, settings


def _stat(pid: int | str) -> tuple[str, list[str]]:
    """A process's command name and the fields of `/proc/<pid>/stat` after it."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.index("(") + 1 : text.rindex(")")], text.rpartition(")")[2].split()


def cpu_seconds(pid: int | str, *, reaped: bool = False) -> float:
    """User + system CPU of `pid` (and its threads) so far; with `reaped`, also that of the
    children it has waited for."""
    fields = _stat(pid)[1]
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if reaped:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
    return ticks / TICKS


def postgres_cpu_seconds() -> float:
    """CPU of the PostgreSQL server so far: its live processes, plus the processes its
    postmaster (the one whose parent is not `postgres`) has reaped."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, fields = _stat(stat.parent.name)
            if name == "postgres":
                postmaster = _stat(fields[1])[0] != "postgres"
                total += cpu_seconds(stat.parent.name, reaped=postmaster)
        except OSError:  # the process ended while we looked
            continue
    return total


def no_cpu_seconds() -> float:
    return 0.0


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
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout (the code before a change), served and measured alternately",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also scripts/bench/floor_app.py (the required stack alone), in alternated blocks",
    )
    parser.add_argument(
        "--io-floor",
        action="store_true",
        help="also scripts/bench/io_floor_app.py (the floor plus the required database work)",
    )
    parser.add_argument(
        "--variants",
        action="store_true",
        help="also the service with one part switched off at a time (limits, stream slots, "
        "memory, info logs) and with TRANSCRIPT_COMMIT=async",
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        type=setting_variant,
        metavar="NAME:KEY=VALUE,...",
        help="also the service with these settings, measured as NAME (repeatable)",
    )
    parser.add_argument("--blocks", type=int, default=4, help="alternated blocks, with several")
    parser.add_argument("--out", default=None, help="results file name (default: turn_cpu_<db>)")
    args = parser.parse_args()
    args.root = args.root.resolve()
    variants = {**(VARIANTS if args.variants else {}), **dict(args.setting)}
    several = args.floor or args.io_floor or variants or args.baseline
    blocks = args.blocks if several else 1
    per_block = max(1, args.turns // blocks)
    spent: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as scratch, ExitStack() as stack:
        directory = Path(scratch)
        url = stack.enter_context(database(args.database, directory, "cpu"))
        model_url, model = stack.enter_context(offline_model_process(directory))
        whole = {"LLM_BASE_URL": model_url, "LOG_LEVEL": "INFO", **LIMITS_CHECKED}
        targets = {"service": stack.enter_context(service(url, directory, args.root, **whole))}
        if args.baseline:
            before_url = stack.enter_context(database(args.database, directory, "baseline"))
            targets["baseline"] = stack.enter_context(
                service(before_url, directory, args.baseline.resolve(), "baseline", **whole)
            )
        for name, changes in variants.items():
            variant_url = stack.enter_context(database(args.database, directory, name))
            targets[name] = stack.enter_context(
                service(variant_url, directory, args.root, name, **{**whole, **changes})
            )
        if args.floor:
            targets["floor"] = stack.enter_context(floor_process(model_url, directory))
        if args.io_floor:
            io_url = stack.enter_context(database(args.database, directory, "io_floor"))
            targets["io_floor"] = stack.enter_context(
                io_floor_service(model_url, io_url, directory)
            )
        postgres = args.database == "postgresql"
        server = postgres_cpu_seconds if postgres else no_cpu_seconds
        for target_url, _pid in targets.values():
            asyncio.run(turns(target_url, 50, args.concurrency))  # warm-up
        for _ in range(blocks):
            for name, (target_url, pid) in targets.items():
                me = os.getpid()
                before = cpu_seconds(pid), cpu_seconds(model), cpu_seconds(me), server()
                asyncio.run(turns(target_url, per_block, args.concurrency))
                after = cpu_seconds(pid), cpu_seconds(model), cpu_seconds(me), server()
                totals = spent.setdefault(name, [0.0, 0.0, 0.0, 0.0])
                for index, (start, end) in enumerate(zip(before, after, strict=True)):
                    totals[index] += end - start
    figures: dict[str, object] = {
        "database": args.database,
        "turns": per_block * blocks,
        "concurrency": args.concurrency,
        "root": str(args.root),
    }
    for name, totals in spent.items():
        server_ms, model_ms, client_ms, database_ms = (
            total * 1000 / (per_block * blocks) for total in totals
        )
        on_server = f", database server {database_ms:.2f} ms" if postgres else ""
        print(
            f"{name}: {per_block * blocks} turns on {args.database} at concurrency "
            f"{args.concurrency}: {server_ms:.2f} ms CPU per turn, stub model {model_ms:.2f} ms, "
            f"client {client_ms:.2f} ms{on_server}"
        )
        prefix = "" if name == "service" else f"{name}_"
        figures[f"{prefix}service_cpu_ms_per_turn"] = round(server_ms, 3)
        figures[f"{prefix}stub_model_cpu_ms_per_turn"] = round(model_ms, 3)
        figures[f"{prefix}client_cpu_ms_per_turn"] = round(client_ms, 3)
        if postgres:
            figures[f"{prefix}database_server_cpu_ms_per_turn"] = round(database_ms, 3)
    write_results(args.out or f"turn_cpu_{args.database}", figures)


if __name__ == "__main__":
    main()
