"""`python -m app serve --workers 2`: the exposition sums every worker's values, whichever
worker answers the scrape, and a worker's open-stream gauge leaves with it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.api.test_serve_workers import REPO, children, is_worker
from tests.support.server import free_port

ROUND = 16  # requests per round, 8 at a time, each on its own connection


@contextmanager
def serve_two_workers(tmp_path: Path, metrics_dir: Path) -> Iterator[str]:
    port = free_port()
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AUTH_", "DATABASE_", "MEMORY_", "LLM_", "FLAG_", "WEB_", "USER_"))
    }
    environment.update(
        PYTHONPATH=str(REPO),
        DATABASE_URL=f"sqlite:///{tmp_path / 'workers.db'}",
        AUTH_DEV_SECRET_FILE=str(tmp_path / "dev-secret"),
        LOG_FORMAT="console",
        PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
    )
    command = [sys.executable, "-m", "app", "serve", "--port", str(port), "--workers", "2"]
    process = subprocess.Popen(
        [*command, "--log-level", "warning"],
        cwd=tmp_path,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, process.communicate()[1]
            workers = [pid for pid in children(process.pid) if is_worker(pid)]
            try:
                ready = httpx.get(f"{base}/readyz", timeout=1).status_code == 200
            except httpx.TransportError:
                ready = False
            if ready and len(workers) == 2:
                break
            assert time.monotonic() < deadline, f"serve did not start two workers ({workers})"
            time.sleep(0.1)  # poll interval only; the outcome is checked above
        yield base
    finally:
        process.terminate()
        process.communicate(timeout=30)


def healthz_count(base: str) -> float:
    text = httpx.get(f"{base}/metrics").text  # a new connection: any worker may answer
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "amem_http_requests_total" and sample.labels.get("route") == "/healthz"
    )


def workers_with_counters(metrics_dir: Path) -> set[str]:
    return {path.stem.rpartition("_")[2] for path in metrics_dir.glob("counter_*.db")}


def test_the_exposition_sums_every_workers_requests(tmp_path: Path) -> None:
    """Requests spread over both workers (until each has recorded some); then every scrape,
    whichever worker answers it, reports exactly the number of requests sent: the sum over
    the workers, never one worker's share. The directory was emptied at start."""
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "counter_1.db").write_bytes(b"left over from an earlier run")
    with serve_two_workers(tmp_path, metrics_dir) as base:
        assert not (metrics_dir / "counter_1.db").exists()
        sent = 0  # readiness was polled on /readyz: /healthz counts only these requests
        with ThreadPoolExecutor(8) as pool:
            for _round in range(20):
                statuses = list(
                    pool.map(lambda _n: httpx.get(f"{base}/healthz").status_code, range(ROUND))
                )
                assert statuses == [200] * ROUND
                sent += ROUND
                if len(workers_with_counters(metrics_dir)) >= 2:
                    break
        assert len(workers_with_counters(metrics_dir)) >= 2, "one worker served everything"
        assert [healthz_count(base) for _scrape in range(6)] == [float(sent)] * 6
