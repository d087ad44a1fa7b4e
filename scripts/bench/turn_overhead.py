"""What the backend adds to a model turn: the same stub model called directly and through the
service, interleaved in one run, at concurrency 1 and 32.

The stub is the offline model served standalone (`scripts/offline_model.py`, no delay between
words). "Direct" streams a completion from it with `AsyncOpenAI`; "backend" is `POST /v1/chat`
over SSE to one uvicorn process whose `LLM_BASE_URL` points at the same stub, on PostgreSQL
or SQLite with memory on (authentication, memory read, prompt, transcript writes, the SSE
encoding). With `--baseline DIR` a second service runs from another checkout (the code before a
change) and is measured in the same alternation. Blocks of direct and backend turns alternate,
so drift on the machine affects every path alike.

    .venv/bin/python scripts/bench/turn_overhead.py --database sqlite --concurrency 1
    .venv/bin/python scripts/bench/turn_overhead.py --database postgresql --concurrency 1
    .venv/bin/python scripts/bench/turn_overhead.py --database sqlite --concurrency 32
        [--turns 200] [--blocks 4] [--baseline /path/to/before-checkout] [--workers N]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from openai import AsyncOpenAI

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.offline.wire import OFFLINE_MODEL_NAME  # noqa: E402
from scripts.bench._common import summary, write_results  # noqa: E402
from scripts.bench._processes import ROOT, dev_token, offline_model, service  # noqa: E402
from tests.support.databases import migrated_engine, postgres_database  # noqa: E402
from tests.support.sse import aiter_events  # noqa: E402

MESSAGE = "hello there"  # no memory request: the offline model answers with its notice


@dataclass
class Samples:
    first_text_ms: list[float] = field(default_factory=list)
    turn_ms: list[float] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def turns(self) -> int:
        return len(self.turn_ms)


async def direct_turn(client: AsyncOpenAI, samples: Samples) -> None:
    started = time.perf_counter()
    first: float | None = None
    stream = await client.chat.completions.create(
        model=OFFLINE_MODEL_NAME, messages=[{"role": "user", "content": MESSAGE}], stream=True
    )
    async for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter()
    ended = time.perf_counter()
    assert first is not None, "the stub sent no text"
    samples.first_text_ms.append((first - started) * 1000)
    samples.turn_ms.append((ended - started) * 1000)


async def backend_turn(client: httpx.AsyncClient, url: str, token: str, samples: Samples) -> None:
    started = time.perf_counter()
    first: float | None = None
    done = False
    async with client.stream(
        "POST",
        f"{url}/v1/chat",
        json={"message": MESSAGE},
        headers={"Authorization": f"Bearer {token}"},
    ) as response:
        assert response.status_code == 200, await response.aread()
        async for event in aiter_events(response):
            if event.event == "delta" and first is None:
                first = time.perf_counter()
            elif event.event == "done":
                done = True
            elif event.event == "error":
                raise RuntimeError(f"turn failed: {event.data}")
    ended = time.perf_counter()
    assert first is not None and done, "the turn sent no text or did not finish"
    samples.first_text_ms.append((first - started) * 1000)
    samples.turn_ms.append((ended - started) * 1000)


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


async def measure(
    stub: str, services: dict[str, str], concurrency: int, turns: int, blocks: int
) -> dict[str, Samples]:
    """Blocks of `direct` and of each service's turns, alternating."""
    limits = httpx.Limits(
        max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4
    )
    samples = {name: Samples() for name in ("direct", *services)}
    tokens = [dev_token(f"bench-overhead-{n}") for n in range(concurrency)]
    async with (
        httpx.AsyncClient(timeout=60, limits=limits) as http,
        AsyncOpenAI(
            base_url=stub,
            api_key="unused",
            max_retries=0,
            http_client=httpx.AsyncClient(timeout=60, limits=limits),
        ) as model,
    ):

        def path(name: str, into: Samples) -> Callable[[int], Awaitable[None]]:
            if name == "direct":
                return lambda _n: direct_turn(model, into)
            return lambda n: backend_turn(http, services[name], tokens[n], into)

        # Warm-up: connections, the service's agent singletons, the database pool.
        for name in samples:
            await block(path(name, Samples()), concurrency * 2, concurrency)
        per_block = max(concurrency, turns // blocks)
        for _ in range(blocks):
            for name, into in samples.items():
                into.wall_seconds += await block(path(name, into), per_block, concurrency)
    return samples


def describe(samples: Samples) -> dict[str, object]:
    return {
        "first_text": summary(samples.first_text_ms),
        "turn": summary(samples.turn_ms),
        "turns_per_second": round(samples.turns / samples.wall_seconds, 1),
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
    parser.add_argument("--out", default=None, help="results name (default from the options)")
    args = parser.parse_args()
    levels = [int(level) for level in args.concurrency.split(",")]
    trees = {"backend": ROOT, **({"baseline": args.baseline} if args.baseline else {})}
    figures: dict[str, object] = {
        "setup": f"offline model standalone (delay 0) as the stub; {args.workers} uvicorn "
        f"worker(s) on {args.database}, memory on, LOG_LEVEL=INFO json to a file; "
        "client in the same machine (asyncio, httpx / AsyncOpenAI)",
        "trees": {name: str(tree) for name, tree in trees.items()},
    }
    with tempfile.TemporaryDirectory() as logs, ExitStack() as stack:
        stub = stack.enter_context(offline_model(Path(logs)))
        urls = {}
        for name, tree in trees.items():
            url = stack.enter_context(database(args.database, Path(logs), name))
            urls[name], _pid = stack.enter_context(
                service(
                    url,
                    Path(logs),
                    root=tree,
                    name=name,
                    workers=args.workers,
                    LLM_BASE_URL=stub,
                    LLM_API_KEY="unused",
                    LLM_MODEL=OFFLINE_MODEL_NAME,
                )
            )
        for concurrency in levels:
            paths = asyncio.run(measure(stub, urls, concurrency, args.turns, args.blocks))
            described = {name: describe(samples) for name, samples in paths.items()}
            row: dict[str, object] = dict(described)
            for name in urls:
                row[f"{name}_vs_direct"] = compare(described["direct"], described[name])
            figures[f"concurrency={concurrency}"] = row
            print(f"{args.database}, concurrency {concurrency}:")
            for name, values in described.items():
                print(
                    f"  {name:8s} first text {values['first_text']}  turn {values['turn']}"
                    f"  {values['turns_per_second']} turns/s"
                )
            for name in urls:
                added = row[f"{name}_vs_direct"]
                print(f"  {name} added: {added}", flush=True)
    levels_name = "-".join(str(level) for level in levels)
    name = args.out or f"turn_overhead_{args.database}_c{levels_name}_w{args.workers}"
    path = write_results(name, figures)
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
