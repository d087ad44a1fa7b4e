"""What a turn's info log lines cost: the thread CPU spent inside `log.info` during real turns,
against the same call in a tight loop.

    .venv/bin/python scripts/bench/log_lines.py [--turns 400] [--out NAME]

The service runs in process (its lifespan included, `TestClient`) on a private SQLite database
with the benchmark's settings (every per-user limit checked, memory on, JSON logs at INFO to a
scratch file) and the zero-delay stub model as a configured endpoint. structlog's
`BoundLogger.info` is wrapped to add up the CPU time of the thread that calls it. The tight
loop logs one `turn.finished`-shaped event repeatedly under the same configuration.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fastapi.testclient import TestClient  # noqa: E402

from app.main import create_app  # noqa: E402
from app.settings import Settings  # noqa: E402
from scripts.bench._common import write_results  # noqa: E402
from scripts.bench._processes import BENCH_SECRET, dev_token, offline_model  # noqa: E402
from scripts.bench.turn_overhead import LIMITS_CHECKED, database  # noqa: E402

MESSAGE = {"message": "hello there, how are you"}


class InfoTimer:
    """Adds up the thread CPU of every `BoundLogger.info` call while installed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._original = structlog.stdlib.BoundLogger.info

    def install(self) -> None:
        original, timer = self._original, self

        def info(logger: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return original(logger, *args, **kwargs)
            finally:
                timer.seconds += time.thread_time() - started
                timer.calls += 1

        structlog.stdlib.BoundLogger.info = info  # type: ignore[method-assign]

    def reset(self) -> None:
        self.seconds, self.calls = 0.0, 0


def tight_loop(lines: int) -> float:
    """µs of CPU per `turn.finished`-shaped line, logged back to back."""
    log = structlog.get_logger("app.telemetry.events")
    started = time.thread_time()
    for _ in range(lines):
        log.info(
            "turn.finished",
            turn_id="8924b230-0b8d-4abc-ac8f-5882d9888572",
            agent="chat",
            outcome="stop",
            rounds=1,
            duration_ms=4.5,
        )
    return (time.thread_time() - started) / lines * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--out", default="log_lines")
    args = parser.parse_args()
    timer = InfoTimer()
    timer.install()
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        real_stderr, sys.stderr = sys.stderr, (directory / "service.log").open("w")
        try:
            with offline_model(directory) as stub, database("sqlite", directory, "logs") as url:
                settings = Settings(
                    database_url=url,
                    auth_mode="dev",
                    auth_dev_secret=BENCH_SECRET,
                    llm_base_url=stub,
                    llm_api_key="unused",
                    log_format="json",
                    log_level="INFO",
                    memory_enabled=True,
                    **{name.lower(): value for name, value in LIMITS_CHECKED.items()},
                )
                with TestClient(create_app(settings)) as client:
                    headers = {"Authorization": f"Bearer {dev_token('bench-logs')}"}
                    for _ in range(50):  # warm-up
                        client.post("/v1/chat", json=MESSAGE, headers=headers)
                    timer.reset()
                    for _ in range(args.turns):
                        assert client.post("/v1/chat", json=MESSAGE, headers=headers).is_success
                    in_turns = timer.seconds / timer.calls * 1e6
                    lines_per_turn = timer.calls / args.turns
                    in_loop = tight_loop(2_000)
        finally:
            sys.stderr.close()
            sys.stderr = real_stderr
    print(
        f"{lines_per_turn:.1f} info lines per turn; {in_turns:.0f} µs of CPU per line inside "
        f"turns, {in_loop:.0f} µs in a tight loop; {lines_per_turn * in_turns / 1000:.2f} ms "
        "per turn"
    )
    write_results(
        args.out,
        {
            "turns": args.turns,
            "info_lines_per_turn": round(lines_per_turn, 2),
            "cpu_us_per_line_in_turns": round(in_turns, 1),
            "cpu_us_per_line_tight_loop": round(in_loop, 1),
            "cpu_ms_per_turn_for_info_lines": round(lines_per_turn * in_turns / 1000, 3),
        },
    )


if __name__ == "__main__":
    main()
