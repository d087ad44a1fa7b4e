"""Where one turn's time goes, phase by phase: the median moment of each mark of a `POST /v1/chat`
(authentication, the turn's start with its memory read and message write in their threads, the
model request and its first text, the answer's row, the SSE writes), in ms from the request's
arrival, over sequential turns against the zero-delay stub.

    .venv/bin/python scripts/bench/turn_timeline.py --database sqlite [--turns 300]
    .venv/bin/python scripts/bench/turn_timeline.py --database postgresql

The service runs as `scripts/bench/timeline_app.py` (the app with a stopwatch on those phases)
with the same settings as `turn_overhead.py`'s. The stub's own time to first text, called
directly, is printed too: what the model costs, not the service. So is the CPU each database
call spent in its worker thread (`time.thread_time()`), against its wall time in the timeline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.offline.wire import OFFLINE_MODEL_NAME  # noqa: E402
from scripts.bench._common import summary, write_results  # noqa: E402
from scripts.bench._processes import dev_token, offline_model, service  # noqa: E402
from scripts.bench.turn_overhead import (  # noqa: E402
    LIMITS_CHECKED,
    Samples,
    backend_turn,
    block,
    database,
    direct_turn,
)

WARM_UP = 30


async def drive(stub: str, url: str, turns: int) -> Samples:
    token = dev_token("bench-timeline")
    direct = Samples()
    async with httpx.AsyncClient(timeout=60) as http:
        await block(lambda _n: backend_turn(http, url, token, Samples()), WARM_UP, 1)
        await block(lambda _n: backend_turn(http, url, token, Samples()), turns, 1)
        await block(lambda _n: direct_turn(http, stub, Samples()), WARM_UP, 1)
        await block(lambda _n: direct_turn(http, stub, direct), turns, 1)
    return direct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default="sqlite")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--out", default=None, help="results name (default turn_timeline_<db>)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        out = directory / "timeline.json"
        with (
            offline_model(directory) as stub,
            database(args.database, directory, "timeline") as url,
            service(
                url,
                directory,
                asgi_app="scripts.bench.timeline_app:app",
                LLM_BASE_URL=stub,
                LLM_API_KEY="unused",
                LLM_MODEL=OFFLINE_MODEL_NAME,
                TIMELINE_OUT=str(out),
                TIMELINE_SKIP=str(WARM_UP),
                **LIMITS_CHECKED,
            ) as (service_url, pid),
        ):
            direct = asyncio.run(drive(stub, service_url, args.turns))
            os.kill(pid, signal.SIGUSR2)
            deadline = time.monotonic() + 10
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            timeline = json.loads(out.read_text())
    stub_figures = {"first_text": summary(direct.first_text_ms), "turn": summary(direct.turn_ms)}
    print(f"{args.database}: median moment of each mark over {timeline['requests']} turns (ms)")
    previous = 0.0
    for name, at in timeline["median_ms"].items():
        print(f"  {at:8.2f}  (+{at - previous:5.2f})  {name}")
        previous = at
    print("CPU of each call in its worker thread, median (ms):")
    for name, ms in timeline["cpu_median_ms"].items():
        print(f"  {ms:8.2f}  {name}")
    print(
        f"the stub called directly: first text p50 {stub_figures['first_text']['p50_ms']} ms, "
        f"whole turn p50 {stub_figures['turn']['p50_ms']} ms"
    )
    path = write_results(
        args.out or f"turn_timeline_{args.database}",
        {"database": args.database, "service": timeline, "stub_direct": stub_figures},
    )
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
