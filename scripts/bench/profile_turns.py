"""Where a turn's time goes: py-spy samples one service process under a steady turn load, then
prints the share of samples per code area (inclusive) and the hottest leaf functions.

    .venv/bin/python scripts/bench/profile_turns.py [--database sqlite] [--seconds 20]
        [--concurrency 4] [--root /path/to/another/checkout] [--gil] [--floor]

With `--floor` it samples `scripts/bench/floor_app.py` (the required stack alone) under the same
load instead, into `results/profile_floor.txt`: compare the two per turn (the samples per turn
are printed) to see what the service adds, part by part.

Needs `py-spy` (the `dev` extra) and the right to trace a child process (root in a container,
or `kernel.yama.ptrace_scope=0`). The raw samples stay in `results/profile_<database>.txt`.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.offline.wire import OFFLINE_MODEL_NAME  # noqa: E402
from scripts.bench._common import RESULTS  # noqa: E402
from scripts.bench._processes import (  # noqa: E402
    ROOT,
    dev_token,
    floor_process,
    offline_model,
    service,
)
from scripts.bench.turn_overhead import (  # noqa: E402
    LIMITS_CHECKED,
    Samples,
    backend_turn,
    block,
    database,
)

# Code areas, by a substring of the sampled frame: what the profile's story is told in.
AREAS = {
    "model client (openai SDK, httpx)": ("openai/", "httpx"),
    "our model round (app/agent/llm.py)": ("app/agent/llm.py",),
    "SSE response (app/api/streams/sse.py)": ("app/api/streams/sse.py", "sse_starlette"),
    "ASGI send chain (middleware wrappers, uvicorn send)": ("otel_send",),
    "database worker threads": ("concurrent/futures/thread.py",),
    "SQLAlchemy": ("sqlalchemy",),
    "logging (structlog, stdlib)": ("structlog", "logging/__init__"),
}


def frame_name(frame: str) -> str:
    match = re.match(r"(.*) \((.*?):\d+\)", frame)
    if not match:
        return frame
    function, path = match.groups()
    return f"{function} [{re.sub(r'.*(site-packages|perf|before)/', '', path)}]"


def report(raw: Path, turns: int) -> None:
    total, areas, leaves = 0, Counter[str](), Counter[str]()
    # One stack per "\n": a frame may hold a character that str.splitlines also splits on.
    for line in filter(None, raw.read_text().split("\n")):
        stack, _, count = line.rpartition(" ")
        samples = int(count)
        total += samples
        for area, needles in AREAS.items():
            if any(needle in stack for needle in needles):
                areas[area] += samples
        leaves[frame_name(stack.split(";")[-1])] += samples
    print(
        f"{total} samples, {total / max(1, turns):.2f} per turn; "
        "share of samples per area (inclusive, areas overlap):"
    )
    for area in AREAS:
        print(f"  {100 * areas[area] / max(1, total):5.1f}%  {area}")
    print("hottest leaf functions:")
    for name, samples in leaves.most_common(12):
        print(f"  {100 * samples / max(1, total):5.1f}%  {name}")


async def load(
    url: str, pid: int, seconds: int, concurrency: int, raw: Path, *, gil: bool = False
) -> int:
    tokens = [dev_token(f"bench-profile-{n}") for n in range(concurrency)]
    spy_binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    async with httpx.AsyncClient(timeout=60) as http:
        await block(lambda n: backend_turn(http, url, tokens[n], Samples()), 50, concurrency)
        # Started, never waited on: it samples while the loop below keeps the turns coming.
        spy = subprocess.Popen(  # noqa: ASYNC220
            [
                spy_binary,
                "record",
                "-p",
                str(pid),
                "-d",
                str(seconds),
                "-r",
                "200",
                "-f",
                "raw",
                "-o",
                str(raw),
                "--nonblocking",
                *(["--gil"] if gil else []),
            ]
        )
        samples = Samples()
        while spy.poll() is None:
            await block(
                lambda n: backend_turn(http, url, tokens[n], samples), concurrency * 4, concurrency
            )
    return samples.turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default="sqlite")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--root", type=Path, default=ROOT, help="the code tree to serve")
    parser.add_argument(
        "--gil",
        action="store_true",
        help="sample only the thread holding the GIL: where CPU goes, not where turns wait",
    )
    parser.add_argument(
        "--floor", action="store_true", help="sample the floor app instead of the service"
    )
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    raw = RESULTS / f"profile_{'floor' if args.floor else args.database}.txt"
    with tempfile.TemporaryDirectory() as logs, ExitStack() as stack:
        directory = Path(logs)
        stub = stack.enter_context(offline_model(directory))
        if args.floor:
            base, pid = stack.enter_context(floor_process(stub, directory))
        else:
            url = stack.enter_context(database(args.database, directory, "profile"))
            base, pid = stack.enter_context(
                service(
                    url,
                    directory,
                    root=args.root,
                    LLM_BASE_URL=stub,
                    LLM_API_KEY="unused",
                    LLM_MODEL=OFFLINE_MODEL_NAME,
                    **LIMITS_CHECKED,
                )
            )
        turns = asyncio.run(load(base, pid, args.seconds, args.concurrency, raw, gil=args.gil))
    print(f"{turns} turns in {args.seconds} s at concurrency {args.concurrency}")
    report(raw, turns)


if __name__ == "__main__":
    main()
