"""How many idle open chat streams one service process holds, and the memory each one costs.

One uvicorn worker on PostgreSQL serves turns from the built-in offline model with the longest
pause between words (OFFLINE_MODEL_DELAY_MS=5000) and a long answer, so every open stream is a
live turn that sends a word every five seconds (plus SSE keep-alive pings): idle, but real. The
client opens streams in steps, waits until each one has streamed its first word, then reads the
server's resident memory (VmRSS in /proc/<pid>/status).

With `--stub` the model is the offline model served standalone (`scripts/offline_model.py`,
same pause) at LLM_BASE_URL, so every stream also holds a real connection to a configured
endpoint through the SDK's HTTP client (the stub's own memory is not counted). With `--floor`
the process measured is `scripts/bench/floor_app.py` instead (the required stack relaying the
same stub, nothing else): what an idle stream costs the stack itself.

With `--trace N` the process traces its allocations (`tracemalloc`, started by a signal after
the warm-up: `scripts/bench/hooks`) while N streams open, and the benchmark prints what they
hold per stream by the package that allocated it (the first frame outside the standard
library) and by line, instead of ramping up. Tracing inflates the resident memory; the
per-stream figures of the ramp are measured without it.

    .venv/bin/python scripts/bench/sse_streams.py [--steps 500,1000,2000,3000,4000,5000]
        [--root /path/to/another/checkout] [--stub | --floor] [--trace N] [--out NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import sysconfig
import tempfile
import time
import tracemalloc
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.bench._common import write_results  # noqa: E402
from scripts.bench._processes import (  # noqa: E402
    ROOT,
    TRACE_ENV,
    dev_token,
    floor_process,
    offline_model,
    service,
)
from tests.support.databases import migrated_engine, postgres_database  # noqa: E402
from tests.support.sse import aiter_events  # noqa: E402

MESSAGE = "tell me a long story"  # the offline model's long answer
OPEN_AT_ONCE = 50  # streams being opened concurrently while ramping up
SETTLE_SECONDS = 3.0
PROBE_SECONDS = 30.0


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


class Streams:
    """Open streams, each read by its own task until the benchmark ends."""

    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client, self.url = client, url
        self.tasks: list[asyncio.Task[None]] = []
        self.failed = 0
        self.ended = 0
        self.tokens = [dev_token(f"bench-streams-{n}") for n in range(50)]

    async def _hold(self, number: int, opened: asyncio.Event) -> None:
        token = self.tokens[number % len(self.tokens)]
        try:
            async with self.client.stream(
                "POST",
                f"{self.url}/v1/chat",
                json={"message": MESSAGE},
                headers={"Authorization": f"Bearer {token}"},
            ) as response:
                if response.status_code != 200:
                    self.failed += 1
                    opened.set()
                    return
                async for event in aiter_events(response):
                    if event.event == "delta":
                        opened.set()
            self.ended += 1  # a stream that ends before the benchmark does is counted
        except (httpx.HTTPError, OSError):
            self.failed += 1
        finally:
            opened.set()

    async def open(self, count: int) -> None:
        gate = asyncio.Semaphore(OPEN_AT_ONCE)

        async def one(number: int) -> None:
            async with gate:
                opened = asyncio.Event()
                self.tasks.append(asyncio.create_task(self._hold(number, opened)))
                await opened.wait()

        start = len(self.tasks)
        async with asyncio.TaskGroup() as group:
            for number in range(start, start + count):
                group.create_task(one(number))

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    @property
    def alive(self) -> int:
        return sum(not task.done() for task in self.tasks)

    async def warm_up(self) -> None:
        """A few streams opened and closed (agents built, pool connected, code paths
        imported), then a pause for the process to settle."""
        await self.open(5)
        await self.close()
        self.tasks.clear()
        await asyncio.sleep(SETTLE_SECONDS)


def stream_client(count: int) -> httpx.AsyncClient:
    """A client that holds `count` streams open at once, with room for a probe."""
    limits = httpx.Limits(max_connections=count + 10, max_keepalive_connections=0)
    return httpx.AsyncClient(timeout=httpx.Timeout(60, read=None), limits=limits)


async def ramp(url: str, pid: int, steps: list[int]) -> dict[str, object]:
    rows = []
    async with stream_client(max(steps)) as client:
        streams = Streams(client, url)
        await streams.warm_up()  # the baseline is taken after it
        baseline = rss_kib(pid)
        print(f"baseline RSS {baseline / 1024:.1f} MiB", flush=True)
        for target in steps:
            started = time.perf_counter()
            await streams.open(target - len(streams.tasks))
            opening = time.perf_counter() - started
            await asyncio.sleep(SETTLE_SECONDS)
            rss = rss_kib(pid)
            row = {
                "open_streams": streams.alive,
                "requested": target,
                "failed": streams.failed,
                "ended_early": streams.ended,
                "server_rss_mib": round(rss / 1024, 1),
                "kib_per_stream": round((rss - baseline) / max(1, streams.alive), 1),
                "seconds_to_open_step": round(opening, 1),
            }
            rows.append(row)
            print(row, flush=True)
            if streams.failed:
                break
        # A turn still answers promptly while the streams are open (bounded: the floor's SDK
        # client holds at most 1,000 connections, so its next turn waits for one to close).
        probe_started = time.perf_counter()

        async def probe() -> float:
            async with client.stream(
                "POST",
                f"{url}/v1/chat",
                json={"message": "hello"},
                headers={"Authorization": f"Bearer {streams.tokens[0]}"},
            ) as response:
                async for event in aiter_events(response):
                    if event.event == "delta":
                        break
            return round((time.perf_counter() - probe_started) * 1000, 1)

        try:
            probe_ms: float | None = await asyncio.wait_for(probe(), PROBE_SECONDS)
        except TimeoutError:
            probe_ms = None
        await streams.close()
    return {
        "baseline_rss_mib": round(baseline / 1024, 1),
        "steps": rows,
        "first_text_ms_with_all_streams_open": probe_ms,
    }


async def traced(url: str, pid: int, count: int, snapshot: Path) -> dict[str, object]:
    """Open `count` streams with the process tracing its allocations; its snapshot once they
    are all open, before any closes."""
    async with stream_client(count) as client:
        streams = Streams(client, url)
        await streams.warm_up()
        os.kill(pid, signal.SIGUSR1)  # start tracing
        await asyncio.sleep(1)
        await streams.open(count)
        await asyncio.sleep(SETTLE_SECONDS)
        alive, failed = streams.alive, streams.failed
        os.kill(pid, signal.SIGUSR2)  # write the snapshot
        deadline = time.monotonic() + 120
        while not await asyncio.to_thread(snapshot.exists):  # renamed into place once written
            if time.monotonic() > deadline:
                raise RuntimeError("the traced process wrote no snapshot")
            await asyncio.sleep(0.5)
        await streams.close()
    if failed or alive != count:
        raise RuntimeError(f"{alive} of {count} streams open, {failed} failed")
    return breakdown(tracemalloc.Snapshot.load(str(snapshot)), count)


def breakdown(snapshot: tracemalloc.Snapshot, streams: int) -> dict[str, object]:
    """KiB per stream by package and by line: each allocation counts for its first frame
    outside the standard library (a dict `asyncio` allocates for our code is ours)."""
    stdlib = sysconfig.get_paths()["stdlib"]
    by_package: Counter[str] = Counter()
    by_line: Counter[str] = Counter()
    for trace in snapshot.traces:
        frames = list(trace.traceback)[::-1]  # innermost first
        frame = next(
            (
                f
                for f in frames
                if "site-packages/" in f.filename or not f.filename.startswith(stdlib)
            ),
            frames[0],
        )
        name = frame.filename
        if "site-packages/" in name:
            name = name.split("site-packages/", 1)[1]
            package = name.split("/", 1)[0].removesuffix(".py")
        elif name.startswith(stdlib):
            name = "stdlib/" + name[len(stdlib) :].lstrip("/")
            package = "the standard library alone"
        else:  # the served tree: by folder of `app/`
            parts = Path(name).parts
            top = next((i for i, part in enumerate(parts) if part in ("app", "scripts")), 0)
            name = "/".join(parts[top:])
            package = "/".join(name.split("/")[:2])
        by_package[package] += trace.size
        by_line[f"{name}:{frame.lineno}"] += trace.size

    def per_stream(counter: Counter[str]) -> dict[str, float]:
        return {key: round(size / 1024 / streams, 2) for key, size in counter.most_common(40)}

    return {
        "streams": streams,
        "traced_kib_per_stream": round(sum(by_package.values()) / 1024 / streams, 1),
        "kib_per_stream_by_package": per_stream(by_package),
        "kib_per_stream_by_line": per_stream(by_line),
    }


def print_breakdown(figures: dict[str, object]) -> None:
    by_package = figures["kib_per_stream_by_package"]
    by_line = figures["kib_per_stream_by_line"]
    assert isinstance(by_package, dict) and isinstance(by_line, dict)
    print(f"traced: {figures['traced_kib_per_stream']} KiB per stream, by package:")
    for name, kib in by_package.items():
        if kib >= 0.05:
            print(f"  {kib:6.2f}  {name}")
    print("the largest lines:")
    for name, kib in list(by_line.items())[:20]:
        print(f"  {kib:6.2f}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", default="500,1000,2000,3000,4000,5000", help="cumulative numbers of open streams"
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="the code tree to serve")
    parser.add_argument(
        "--stub",
        action="store_true",
        help="the model served standalone over HTTP (a configured endpoint), not in process",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="measure scripts/bench/floor_app.py (the required stack alone) relaying the stub",
    )
    parser.add_argument(
        "--trace",
        type=int,
        default=0,
        metavar="N",
        help="open N streams with tracemalloc on and print what they hold, by package",
    )
    parser.add_argument("--out", default="sse_streams", help="results name")
    args = parser.parse_args()
    steps = [int(step) for step in args.steps.split(",")]
    with (
        tempfile.TemporaryDirectory() as logs,
        postgres_database() as database_url,
        ExitStack() as stack,
    ):
        migrated_engine(database_url).dispose()
        model: dict[str, str] = {}
        snapshot = Path(logs) / "tracemalloc.snapshot"
        if args.trace:
            os.environ[TRACE_ENV] = str(snapshot)  # the served process inherits it
        if args.stub or args.floor:
            model["LLM_BASE_URL"] = stack.enter_context(offline_model(Path(logs), delay_ms=5000))
            model["LLM_API_KEY"] = "unused"
        if args.floor:
            served = floor_process(model["LLM_BASE_URL"], Path(logs))
        else:
            served = service(
                database_url,
                Path(logs),
                root=args.root,
                OFFLINE_MODEL_DELAY_MS="5000",
                TURN_TIMEOUT_SECONDS="3600",
                LOG_LEVEL="WARNING",
                # Each of the 50 users holds many streams: the per-user limits (4 streams, 30
                # turns a minute by default) would refuse most of them.
                USER_MAX_STREAMS="0",
                USER_TURNS_PER_MINUTE="0",
                **model,
            )
        with served as (url, pid):
            if args.trace:
                figures = asyncio.run(traced(url, pid, args.trace, snapshot))
                print_breakdown(figures)
            else:
                figures = asyncio.run(ramp(url, pid, steps))
    if args.floor:
        figures["setup"] = (
            "scripts/bench/floor_app.py in one uvicorn worker (no database, memory or "
            "authentication) relaying the offline model served standalone, a word every 5 s; "
            "client on the same machine"
        )
    else:
        figures["setup"] = (
            "one uvicorn worker on PostgreSQL, memory on; each stream a live turn "
            "of the offline model sending a word every 5 s"
            + (", served standalone over HTTP (a configured endpoint)" if args.stub else "")
            + "; client on the same machine"
        )
    figures["tree"] = str(args.root)
    path = write_results(args.out, figures)
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
