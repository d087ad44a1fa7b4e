"""What an info log line costs by the path it takes: the service's (structlog through the
standard library's logging, `app/telemetry/logging.py`) against structlog writing the same JSON
line itself (`make_filtering_bound_logger`, `WriteLoggerFactory`), both with the same
processors and redaction. Each is timed as thread CPU per `log.info`, in a tight loop ("hot")
and with unrelated work between lines ("between work": serialising 2,000 small dicts, which
pushes the logging code out of the processor's caches, as a turn does).

    .venv/bin/python scripts/bench/log_paths.py [--lines 3000] [--runs 2] [--out NAME]

Each path runs in a fresh interpreter, alternated `--runs` times; lines go to a scratch file.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.bench._common import write_results  # noqa: E402

PATHS = ("stdlib", "structlog")
JUNK = [{"a": n, "b": "x" * 20, "c": [1, 2, 3]} for n in range(2000)]


def measure(path: str, lines: int, out: Path) -> dict[str, float]:
    """In this process: configure the service's logging, then (for `structlog`) let structlog
    write its lines itself, and time `lines` info lines each way."""
    import structlog

    from app.settings import Settings
    from app.telemetry.logging import configure_logging
    from app.telemetry.redaction import redact_event
    from app.telemetry.tracebacks import safe_exc_info

    stream = out.open("w")
    sys.stderr = stream  # the service's handler writes to whatever sys.stderr is
    configure_logging(
        Settings(_env_file=None, log_format="json", log_level="INFO")  # type: ignore[call-arg]
    )
    if path == "structlog":
        structlog.configure(
            processors=[
                structlog.contextvars.merge_contextvars,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                safe_exc_info,
                redact_event,
                structlog.processors.JSONRenderer(),
            ],
            wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
            logger_factory=structlog.WriteLoggerFactory(file=stream),
            cache_logger_on_first_use=True,
        )
    log = structlog.get_logger("app.agent.turn")

    def line() -> None:
        log.info(
            "turn.finished",
            turn_id="t" * 32,
            conversation_id="c" * 32,
            outcome="done",
            memory_status="available",
            rounds=1,
            prompt_tokens=100,
            completion_tokens=20,
            duration_ms=12.3,
        )

    figures = {}
    for label, between in (("hot", False), ("between_work", True)):
        spent = 0
        for _ in range(lines):
            if between:
                for item in JUNK:
                    json.dumps(item)
            started = time.thread_time_ns()
            line()
            spent += time.thread_time_ns() - started
        figures[f"{label}_us"] = round(spent / lines / 1000, 1)
    stream.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", default="log_paths")
    parser.add_argument("--one", choices=PATHS, help=argparse.SUPPRESS)  # a child's path
    args = parser.parse_args()
    if args.one:
        with tempfile.TemporaryDirectory() as scratch:
            print(json.dumps(measure(args.one, args.lines, Path(scratch) / "lines.log")))
        return
    runs: dict[str, list[dict[str, float]]] = {path: [] for path in PATHS}
    for _ in range(args.runs):
        for path in PATHS:
            child = subprocess.run(
                [sys.executable, __file__, "--one", path, "--lines", str(args.lines)],
                check=True,
                capture_output=True,
                text=True,
            )
            runs[path].append(json.loads(child.stdout.strip().splitlines()[-1]))
            print(path, runs[path][-1])
    write_results(args.out, {"lines_per_run": args.lines, "runs": runs})


if __name__ == "__main__":
    main()
