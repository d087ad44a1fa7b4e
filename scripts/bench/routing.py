"""What finding a request's route costs: the app's top-level routes tried in order, as the
router does (the first full match wins), for a request to each route the service serves, in
microseconds per request. The turn routes are printed first.

    .venv/bin/python scripts/bench/routing.py [--root /path/to/another/checkout] [--out NAME]

With `--root` the app of another checkout is measured (this script's copy of the matching
loop), to compare an order of the routers with another.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def per_request_us(app: Any, scope: dict[str, Any], rounds: int) -> float:
    from starlette.routing import Match

    routes = app.router.routes
    method, path = scope["method"], scope["path"]

    def route_once() -> None:
        for route in routes:
            if route.matches(dict(scope))[0] == Match.FULL:
                return
        raise AssertionError(f"no route for {method} {path}")

    blocks = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(rounds):
            route_once()
        blocks.append((time.perf_counter() - started) / rounds * 1e6)
    return statistics.median(blocks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the code tree to measure")
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--out", default="routing")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    # This checkout's helpers and results; the measured checkout's app.
    from scripts.bench._common import write_results
    from tests.support.routes import TURN_ROUTES, http_scope, requests

    sys.path.insert(0, str(args.root.resolve()))
    from app.main import create_app
    from tests.support.apps import api_settings

    with tempfile.TemporaryDirectory() as directory:
        app = create_app(api_settings(f"sqlite:///{directory}/routing.db"))
        ordered = TURN_ROUTES + [r for r in requests(app) if r not in TURN_ROUTES]
        figures = {
            f"{m} {p}": round(per_request_us(app, http_scope(m, p), args.rounds), 1)
            for m, p in ordered
        }
    for name, micros in figures.items():
        print(f"{micros:8.1f} us  {name}")
    others = [v for k, v in figures.items() if tuple(k.split(" ", 1)) not in TURN_ROUTES]
    print(f"{statistics.mean(others):8.1f} us  mean of the other routes")
    path = write_results(args.out, {"root": str(args.root), "us_per_request": figures})
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
