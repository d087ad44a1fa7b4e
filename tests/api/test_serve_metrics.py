"""`python -m app serve --workers 2`: the exposition sums every worker's values, whichever
worker answers the scrape, and a worker's open-stream gauge leaves with it."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.serve_process import serve_workers

ROUND = 16  # requests per round, 8 at a time, each on its own connection


@contextmanager
def serve_two_workers(tmp_path: Path, metrics_dir: Path) -> Iterator[str]:
    with serve_workers(tmp_path, 2, PROMETHEUS_MULTIPROC_DIR=str(metrics_dir)) as served:
        yield served.base


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
