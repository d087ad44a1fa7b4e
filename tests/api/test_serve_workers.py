"""`python -m app serve --workers N`: N worker processes serve one port, each on its own engine."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.server import free_port

REPO = Path(__file__).resolve().parents[2]


def children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(child) for child in text.split()]


def is_worker(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except FileNotFoundError:
        return False
    return b"multiprocessing" in command and b"spawn_main" in command


def test_serve_with_two_workers_runs_two_processes_that_answer(tmp_path: Path) -> None:
    """Two worker processes come up under the one `serve` process and the port answers turns'
    prerequisites (ready, tokens, memory writes) through them; stopping `serve` stops both."""
    port = free_port()
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AUTH_", "DATABASE_", "MEMORY_", "LLM_", "FLAG_", "WEB_"))
    }
    environment.update(
        PYTHONPATH=str(REPO),
        DATABASE_URL=f"sqlite:///{tmp_path / 'workers.db'}",
        AUTH_DEV_SECRET_FILE=str(tmp_path / "dev-secret"),
        LOG_FORMAT="console",
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app",
            "serve",
            "--port",
            str(port),
            "--workers",
            "2",
            "--log-level",
            "warning",
        ],
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
    finally:
        process.terminate()
        process.communicate(timeout=30)
    assert not any(is_worker(pid) for pid in workers)
