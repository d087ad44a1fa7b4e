"""`python -m app serve --workers N`: N worker processes serve one port, each on its own engine."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.serve_process import is_worker, serve_workers


def test_serve_with_two_workers_runs_two_processes_that_answer(tmp_path: Path) -> None:
    """Two worker processes come up under the one `serve` process and the port answers turns'
    prerequisites (ready, tokens, memory writes) through them; stopping `serve` stops both."""
    with serve_workers(tmp_path, 2) as served:
        base = served.base
        token = httpx.post(f"{base}/dev/token", json={"sub": "alice"}).json()["access_token"]
        for n in range(4):  # several connections: the kernel spreads them over the workers
            with httpx.Client() as client:
                response = client.post(
                    f"{base}/v1/memory/operations",
                    headers={"Authorization": f"Bearer {token}"},
                    json={
                        "operations": [{"target": "user", "action": "add", "content": f"Fact {n}."}]
                    },
                )
            assert response.status_code == 200, response.text
    assert len(served.workers) == 2
    assert not any(is_worker(pid) for pid in served.workers)
