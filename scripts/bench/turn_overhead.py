"""What the backend adds to a model turn: the same stub model called directly and through the
service, interleaved in one run, at concurrency 1 and 32.

The stub is the offline model served standalone (`scripts/offline_model.py`, no delay between
words). "Direct" streams a completion from it; "backend" is `POST /v1/chat`
over SSE to one uvicorn process whose `LLM_BASE_URL` points at the same stub, on PostgreSQL
or SQLite with memory on (authentication, memory read, prompt, transcript writes, the SSE
encoding). With `--baseline DIR` a second service runs from another checkout (the code before a
change) and is measured in the same alternation. Blocks of direct and backend turns alternate,
so drift on the machine affects every path alike. Both paths read their body as raw bytes
(see `read_turn`), so the client costs each the same.

    .venv/bin/python scripts/bench/turn_overhead.py --database sqlite --concurrency 1
    .venv/bin/python scripts/bench/turn_overhead.py --database postgresql --concurrency 1
    .venv/bin/python scripts/bench/turn_overhead.py --database sqlite --concurrency 32
        [--turns 200] [--blocks 4] [--baseline /path/to/before-checkout] [--workers N]
        [--compare-limits] [--full-memory]

With `--full-memory` every benchmark user's memory is filled first (`FULL_MEMORY`: both stores
near their limits, through `POST /v1/memory/operations`), so each turn's prompt shows a full
memory block, as a long-time user's does; without it the users' memory is empty.

The service checks every per-user limit on each turn without reaching one (`LIMITS_CHECKED`);
`--compare-limits` serves the same tree with the limits off as `no_limits`, measured alongside.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy.engine import make_url  # noqa: E402

from app.offline.wire import OFFLINE_MODEL_NAME  # noqa: E402
from scripts.bench._common import summary, write_results  # noqa: E402
from scripts.bench._processes import (  # noqa: E402
    ROOT,
    dev_token,
    floor_process,
    io_floor_service,
    offline_model,
    service,
)
from tests.support.databases import migrated_engine, postgres_database  # noqa: E402
from tests.support.postgres_servers import pgbouncer  # noqa: E402

MESSAGE = "hello there"  # no memory request: the offline model answers with its notice
# Every per-user limit is checked on each turn (stream slot, minute counter, daily budget) but
# none is reached: the benchmark sends far more than the default 30 turns a minute per user.
LIMITS_CHECKED = {
    "USER_MAX_STREAMS": "4",
    "USER_TURNS_PER_MINUTE": "100000",
    "USER_DAILY_TOKENS": "1000000000000",
}
LIMITS_OFF = {"USER_MAX_STREAMS": "0", "USER_TURNS_PER_MINUTE": "0", "USER_DAILY_TOKENS": "0"}

_FACTS = (
    "prefers green tea to coffee in the morning and black coffee after lunch",
    "lives near the river in an old flat with a small balcony full of herbs",
    "works as a night shift nurse in the cardiology ward of the city hospital",
    "has two cats called Miso and Tofu who sleep on the radiator all winter",
    "is learning Portuguese before a long trip along the coast next spring",
    "plays the cello in an amateur orchestra that rehearses on Thursday evenings",
    "does not eat meat and likes cooking lentil stews with a lot of cumin",
    "runs along the canal on weekends and is training for a half marathon",
    "reads crime novels set in Scandinavia and keeps a list of favourite authors",
    "asked for short answers with the main point first and examples after it",
    "uses a Linux laptop at home and a locked down Windows machine at work",
    "is allergic to penicillin and mentions it whenever medicine comes up",
)
_NUMBERS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
# Both stores near their limits (1,375 and 2,200 characters): the user profile seven entries,
# the agent's memory eleven, each a plain fact that the content policy accepts.
FULL_MEMORY = [
    *(
        {
            "target": "user",
            "action": "add",
            "content": f"The user {_FACTS[n]}, and {_FACTS[n + 1]} (entry {number}).",
        }
        for n, number in enumerate(_NUMBERS[:7])
    ),
    *(
        {
            "target": "memory",
            "action": "add",
            "content": f"Session {n}: the user {_FACTS[n]}; also {_FACTS[(n + 5) % 12]}.",
        }
        for n in range(1, 12)
    ),
]


@dataclass
class Samples:
    first_text_ms: list[float] = field(default_factory=list)
    turn_ms: list[float] = field(default_factory=list)
    wall_seconds: float = 0.0
    cut_short: int = 0  # streams whose connection closed before their end

    @property
    def turns(self) -> int:
        return len(self.turn_ms)


# Both paths are read the same light way: the body's raw bytes, searched only for the marker of
# the first text and of the end. Parsing the stub's chunks with the SDK (a pydantic model per
# chunk) cost the client several milliseconds per turn that the service's path did not pay,
# which made "direct" slower and the service's added time look smaller than it is.
_FIRST_CONTENT = re.compile(rb'"content": ?"[^"]')  # the stub's first non-empty text chunk
_DIRECT_BODY = json.dumps(
    {
        "model": OFFLINE_MODEL_NAME,
        "messages": [{"role": "user", "content": MESSAGE}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
).encode()


class _Body:
    """The bytes read so far and when the first of `marker` arrived (a marker cut between two
    reads is found once the second arrives)."""

    __slots__ = ("data", "first", "marker")

    def __init__(self, marker: re.Pattern[bytes]) -> None:
        self.data = bytearray()
        self.first: float | None = None
        self.marker = marker

    def add(self, piece: bytes) -> None:
        start = max(0, len(self.data) - 32)
        self.data += piece
        if self.first is None and self.marker.search(self.data, start):
            self.first = time.perf_counter()


async def read_turn(
    client: httpx.AsyncClient,
    url: str,
    samples: Samples,
    marker: re.Pattern[bytes],
    **request: Any,
) -> bytes:
    """POST, read the whole streamed body, record first-text and whole-turn times."""
    started = time.perf_counter()
    body = _Body(marker)
    async with client.stream("POST", url, **request) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{url} answered {response.status_code}: {await response.aread()!r}")
        async for piece in response.aiter_raw():
            body.add(piece)
    ended = time.perf_counter()
    if body.first is None:
        raise RuntimeError(f"{url} sent no text")
    samples.first_text_ms.append((body.first - started) * 1000)
    samples.turn_ms.append((ended - started) * 1000)
    return bytes(body.data)


async def direct_turn(client: httpx.AsyncClient, stub: str, samples: Samples) -> None:
    """A streamed completion from the stub itself."""
    data = await read_turn(
        client,
        f"{stub}/chat/completions",
        samples,
        _FIRST_CONTENT,
        content=_DIRECT_BODY,
        headers={"Content-Type": "application/json", "Authorization": "Bearer unused"},
    )
    if not data.rstrip().endswith(b"data: [DONE]"):
        raise RuntimeError("the stub's stream did not end with [DONE]")


_DELTA = re.compile(rb"event: delta")


async def backend_turn(client: httpx.AsyncClient, url: str, token: str, samples: Samples) -> None:
    """`POST /v1/chat` through the service, read to its end."""
    data = await read_turn(
        client,
        f"{url}/v1/chat",
        samples,
        _DELTA,
        json={"message": MESSAGE},
        headers={"Authorization": f"Bearer {token}"},
    )
    if b"event: error" in data or b"event: done" not in data:
        raise RuntimeError(f"the turn did not finish: {data[-300:]!r}")


async def block(turn: Callable[[int], Awaitable[None]], turns: int, concurrency: int) -> float:
    """`turns` turns by `concurrency` workers; returns the wall time."""
    queue = iter(range(turns))

    async def worker(number: int) -> None:
        for _ in queue:
            await turn(number)

    started = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for number in range(concurrency):
            group.create_task(worker(number))
    return time.perf_counter() - started


async def fill_memory(client: httpx.AsyncClient, url: str, token: str) -> None:
    """`FULL_MEMORY` in the user's memory, in one batch (a second call finds it already there)."""
    headers = {"Authorization": f"Bearer {token}"}
    current = (await client.get(f"{url}/v1/memory", headers=headers)).json()
    if current["user"]["entries"]:
        return
    response = await client.post(
        f"{url}/v1/memory/operations", json={"operations": FULL_MEMORY}, headers=headers
    )
    if response.status_code != 200:
        raise RuntimeError(f"{url} refused the memory: {response.text}")


async def measure(
    stub: str,
    services: dict[str, str],
    concurrency: int,
    turns: int,
    blocks: int,
    *,
    full_memory: bool = False,
) -> dict[str, Samples]:
    """Blocks of `direct` and of each service's turns, alternating."""
    limits = httpx.Limits(
        max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4
    )
    samples = {name: Samples() for name in ("direct", *services)}
    tokens = [dev_token(f"bench-overhead-{n}") for n in range(concurrency)]
    async with (
        httpx.AsyncClient(timeout=60, limits=limits) as http,
        httpx.AsyncClient(timeout=60, limits=limits) as model,
    ):

        def path(name: str, into: Samples) -> Callable[[int], Awaitable[None]]:
            async def turn(n: int) -> None:
                try:
                    if name == "direct":
                        await direct_turn(model, stub, into)
                    else:
                        await backend_turn(http, services[name], tokens[n], into)
                except httpx.TransportError:
                    # Counted, not fatal: under load the floor's own model client can lose its
                    # connection to the stub, and the floor (no error handling) cuts its stream.
                    into.cut_short += 1

            return turn

        if full_memory:
            for name, url in services.items():
                if not name.startswith(("floor", "io_floor")):
                    for token in tokens:
                        await fill_memory(http, url, token)
        # Warm-up: connections, the service's agent singletons, the database pool.
        for name in samples:
            await block(path(name, Samples()), concurrency * 2, concurrency)
        per_block = max(concurrency, turns // blocks)
        names = list(samples)
        for number in range(blocks):
            # Each block starts with the next path, so that no path always follows the same one.
            shift = number % len(names)
            for name in names[shift:] + names[:shift]:
                into = samples[name]
                into.wall_seconds += await block(path(name, into), per_block, concurrency)
    return samples


def describe(samples: Samples) -> dict[str, object]:
    return {
        "first_text": summary(samples.first_text_ms),
        "turn": summary(samples.turn_ms),
        "turns_per_second": round(samples.turns / samples.wall_seconds, 1),
        "cut_short": samples.cut_short,
    }


def compare(direct: dict[str, object], backend: dict[str, object]) -> dict[str, object]:
    added: dict[str, object] = {}
    for metric in ("first_text", "turn"):
        for stat in ("p50_ms", "p99_ms"):
            d = direct[metric][stat]  # type: ignore[index]
            b = backend[metric][stat]  # type: ignore[index]
            added[f"{metric}_{stat}"] = {
                "added_ms": round(b - d, 2),
                "ratio": round(b / d, 2) if d else None,
            }
    added["turns_per_second_ratio"] = round(
        backend["turns_per_second"] / direct["turns_per_second"],  # type: ignore[operator]
        3,
    )
    return added


@contextmanager
def database(kind: str, directory: Path, name: str) -> Iterator[str]:
    """A private, migrated database of `kind` for one service."""
    if kind == "sqlite":
        url = f"sqlite:///{directory / name}.db"
        migrated_engine(url).dispose()
        yield url
        return
    with postgres_database() as url:
        migrated_engine(url).dispose()
        yield url


def tree_options(parser: argparse.ArgumentParser) -> None:
    """The options of a benchmark that serves this tree and, with `--baseline`, another one."""
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default="sqlite")
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout (before)")
    parser.add_argument("--out", default=None, help="results name")


def trees(args: argparse.Namespace) -> dict[str, Path]:
    """`service` (this tree) and, with `--baseline`, `baseline`."""
    return {"service": ROOT, **({"baseline": args.baseline} if args.baseline else {})}


def serve_trees(
    stack: ExitStack,
    kind: str,
    logs: Path,
    trees: dict[str, Path],
    stub: str,
    *,
    workers: int = 1,
    **settings: str,
) -> dict[str, str]:
    """Each code tree served by uvicorn on a private database of `kind`, its model the stub;
    their URLs by name (the processes end with `stack`)."""
    urls = {}
    for name, tree in trees.items():
        url = stack.enter_context(database(kind, logs, name))
        urls[name], _pid = stack.enter_context(
            service(
                url,
                logs,
                root=tree,
                name=name,
                workers=workers,
                LLM_BASE_URL=stub,
                LLM_API_KEY="unused",
                LLM_MODEL=OFFLINE_MODEL_NAME,
                **settings,
            )
        )
    return urls


@contextmanager
def serving(args: argparse.Namespace, **settings: str) -> Iterator[dict[str, str]]:
    """`trees(args)` served on private `--database` databases, their model the offline model
    served standalone; their URLs by name, until the block ends."""
    with tempfile.TemporaryDirectory() as logs, ExitStack() as stack:
        stub = stack.enter_context(offline_model(Path(logs)))
        yield serve_trees(stack, args.database, Path(logs), trees(args), stub, **settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--concurrency", default="1,32", help="comma-separated levels")
    parser.add_argument("--turns", type=int, default=200, help="turns per path and level")
    parser.add_argument("--blocks", type=int, default=4, help="alternating blocks per level")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout served and measured alongside (before)",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also measure scripts/bench/floor_app.py (the required stack alone) alongside",
    )
    parser.add_argument(
        "--io-floor",
        action="store_true",
        help="also measure scripts/bench/io_floor_app.py (the floor plus a turn's required "
        "database work, raw statements on a database of its own) alongside",
    )
    parser.add_argument(
        "--pgbouncer",
        action="store_true",
        help="PostgreSQL only: also serve this checkout through a PgBouncer in transaction "
        "mode (DB_POOLER=transaction), measured alongside as the path 'pgbouncer' (and the "
        "baseline's as 'baseline_pgbouncer')",
    )
    parser.add_argument(
        "--compare-limits",
        action="store_true",
        help="also serve this tree with every per-user limit off (`no_limits`) alongside",
    )
    parser.add_argument(
        "--full-memory",
        action="store_true",
        help="fill every benchmark user's memory first (FULL_MEMORY), for each service path",
    )
    parser.add_argument("--out", default=None, help="results name (default from the options)")
    args = parser.parse_args()
    levels = [int(level) for level in args.concurrency.split(",")]
    trees = {"backend": ROOT, **({"baseline": args.baseline} if args.baseline else {})}
    if args.compare_limits:
        trees["no_limits"] = ROOT
    figures: dict[str, object] = {
        "setup": f"offline model standalone (delay 0) as the stub; {args.workers} uvicorn "
        f"worker(s) on {args.database}, memory on"
        f"{' and full (FULL_MEMORY)' if args.full_memory else ''}, LOG_LEVEL=INFO json to a file; "
        "client in the same machine (asyncio, httpx, both bodies read as raw bytes)",
        "trees": {name: str(tree) for name, tree in trees.items()},
    }
    with tempfile.TemporaryDirectory() as logs, ExitStack() as stack:
        stub = stack.enter_context(offline_model(Path(logs)))
        urls: dict[str, str] = {}
        for name, tree in trees.items():
            limits = LIMITS_OFF if name == "no_limits" else LIMITS_CHECKED
            urls |= serve_trees(
                stack, args.database, Path(logs), {name: tree}, stub, workers=args.workers, **limits
            )
        if args.pgbouncer:
            if args.database != "postgresql":
                parser.error("--pgbouncer needs --database postgresql")
            # This tree behind PgBouncer ("pgbouncer"), and the baseline's too when given.
            pooled_trees = {"pgbouncer": ROOT}
            if args.baseline:
                pooled_trees["baseline_pgbouncer"] = args.baseline
            if args.io_floor:
                url = stack.enter_context(database(args.database, Path(logs), "io_floor_pgb"))
                bouncer = stack.enter_context(pgbouncer("127.0.0.1", make_url(url).port or 5432))
                urls["io_floor_pgbouncer"], _pid = stack.enter_context(
                    io_floor_service(
                        stub,
                        bouncer.url_for(url),
                        Path(logs),
                        name="io_floor_pgbouncer",
                        pooler="transaction",
                    )
                )
            for pooled_name, tree in pooled_trees.items():
                url = stack.enter_context(database(args.database, Path(logs), pooled_name))
                bouncer = stack.enter_context(pgbouncer("127.0.0.1", make_url(url).port or 5432))
                urls[pooled_name], _pid = stack.enter_context(
                    service(
                        bouncer.url_for(url),
                        Path(logs),
                        root=tree,
                        name=pooled_name,
                        workers=args.workers,
                        LLM_BASE_URL=stub,
                        LLM_API_KEY="unused",
                        LLM_MODEL=OFFLINE_MODEL_NAME,
                        DB_POOLER="transaction",
                        **LIMITS_CHECKED,
                    )
                )
        if args.floor:
            urls["floor"], _pid = stack.enter_context(floor_process(stub, Path(logs)))
        if args.io_floor:
            url = stack.enter_context(database(args.database, Path(logs), "io_floor"))
            urls["io_floor"], _pid = stack.enter_context(io_floor_service(stub, url, Path(logs)))
        for concurrency in levels:
            paths = asyncio.run(
                measure(
                    stub,
                    urls,
                    concurrency,
                    args.turns,
                    args.blocks,
                    full_memory=args.full_memory,
                )
            )
            described = {name: describe(samples) for name, samples in paths.items()}
            row: dict[str, object] = dict(described)
            for name in urls:
                row[f"{name}_vs_direct"] = compare(described["direct"], described[name])
            figures[f"concurrency={concurrency}"] = row
            print(f"{args.database}, concurrency {concurrency}:")
            for name, values in described.items():
                print(
                    f"  {name:8s} first text {values['first_text']}  turn {values['turn']}"
                    f"  {values['turns_per_second']} turns/s, {values['cut_short']} cut short"
                )
            for name in urls:
                added = row[f"{name}_vs_direct"]
                print(f"  {name} added: {added}", flush=True)
    levels_name = "-".join(str(level) for level in levels)
    pooled = "_pgbouncer" if args.pgbouncer else ""
    name = args.out or f"turn_overhead_{args.database}{pooled}_c{levels_name}_w{args.workers}"
    path = write_results(name, figures)
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
