"""Shared helpers for the benchmarks: percentiles, machine description, results file."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": round(percentile(values, 0.50), 3),
        "p99_ms": round(percentile(values, 0.99), 3),
        "mean_ms": round(statistics.fmean(values), 3) if values else float("nan"),
    }


def machine() -> dict[str, Any]:
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        cpu = platform.processor()
    try:
        pg = subprocess.run(["psql", "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        pg = "unknown"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "postgresql_client": pg,
    }


def write_results(name: str, figures: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {
        "benchmark": name,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        # The 1, 5 and 15 minute load averages as the run ended: the machine is shared.
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "figures": figures,
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path
