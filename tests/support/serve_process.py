"""`python -m app serve --workers N` as a child process: started with a clean environment on a
SQLite file, waited for until the port answers and N worker processes exist, stopped at exit."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.server import free_port

REPO = Path(__file__).resolve().parents[2]
# Settings a developer's shell may carry: the child must see only what the test gives it.
_OWN_PREFIXES = ("AUTH_", "DATABASE_", "MEMORY_", "LLM_", "FLAG_", "WEB_", "USER_")


def children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(child) for child in text.split()]


def is_worker(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except FileNotFoundError:
        return False
    return b"multiprocessing" in command and b"spawn_main" in command


@dataclass
class Served:
    base: str
    workers: list[int]


@contextmanager
def serve_workers(tmp_path: Path, workers: int, **settings: str) -> Iterator[Served]:
    port = free_port()
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith(_OWN_PREFIXES)
    }
    environment.update(
        PYTHONPATH=str(REPO),
        DATABASE_URL=f"sqlite:///{tmp_path / 'workers.db'}",
        AUTH_DEV_SECRET_FILE=str(tmp_path / "dev-secret"),
        LOG_FORMAT="console",
        **settings,
    )
    command = [sys.executable, "-m", "app", "serve", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--workers", str(workers), "--log-level", "warning"],
        cwd=tmp_path,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    served = Served(base=f"http://127.0.0.1:{port}", workers=[])
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, process.communicate()[1]
            served.workers = [pid for pid in children(process.pid) if is_worker(pid)]
            try:
                ready = httpx.get(f"{served.base}/readyz", timeout=1).status_code == 200
            except httpx.TransportError:
                ready = False
            if ready and len(served.workers) == workers:
                break
            assert time.monotonic() < deadline, f"serve did not start {workers} workers"
            time.sleep(0.1)  # poll interval only; the outcome is checked above
        yield served
    finally:
        process.terminate()
        process.communicate(timeout=30)
