"""Processes for the benchmarks: the offline model served standalone and the service itself."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
# Set to a file, a served process traces its memory on signals (scripts/bench/hooks).
TRACE_ENV = "BENCH_TRACEMALLOC"
HOOKS = Path(__file__).resolve().parent / "hooks"
BENCH_SECRET = "bench-dev-secret-" + "0123456789abcdef" * 3


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def process(
    args: list[str], url: str, env: dict[str, str], log: Path, root: Path = ROOT
) -> Iterator[int]:
    """Start a server process in `root`, wait until `url` answers; yields its pid; stops it."""
    with log.open("wb") as output:
        child = subprocess.Popen(args, cwd=root, env=env, stdout=output, stderr=subprocess.STDOUT)
        try:
            # A loaded machine can take longer to import the app: BENCH_START_SECONDS sets it.
            deadline = time.monotonic() + float(os.environ.get("BENCH_START_SECONDS", "300"))
            while True:
                if child.poll() is not None:
                    raise RuntimeError(f"{args[:4]} exited; see {log}")
                try:
                    httpx.get(url, timeout=1)
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{args[:4]} did not start; see {log}") from None
                    time.sleep(0.05)
            yield child.pid
        finally:
            child.terminate()
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


@contextmanager
def offline_model(log_dir: Path, delay_ms: int = 0) -> Iterator[str]:
    """`scripts/offline_model.py` on a free port; yields its OpenAI base URL (…/v1)."""
    with offline_model_process(log_dir, delay_ms) as (url, _pid):
        yield url


@contextmanager
def offline_model_process(log_dir: Path, delay_ms: int = 0) -> Iterator[tuple[str, int]]:
    """`offline_model`, yielding (its OpenAI base URL, its pid)."""
    port = free_port()
    args = [
        sys.executable,
        "scripts/offline_model.py",
        "--port",
        str(port),
        "--delay-ms",
        str(delay_ms),
    ]
    with process(
        args, f"http://127.0.0.1:{port}/v1/models", dict(os.environ), log_dir / "offline-model.log"
    ) as pid:
        yield f"http://127.0.0.1:{port}/v1", pid


@contextmanager
def service(
    database_url: str,
    log_dir: Path,
    root: Path = ROOT,
    name: str = "service",
    workers: int = 1,
    asgi_app: str = "app.main:app",
    **settings: str,
) -> Iterator[tuple[str, int]]:
    """`uvicorn app.main:app` (or `asgi_app`) with production-like settings, run from the code
    tree `root` (a checkout of another commit, to compare before and after); yields (url, pid)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("LLM_", "AUTH_", "OTEL_", "DATABASE_", "MEMORY_"))
    }
    env.update(
        {
            "DATABASE_URL": database_url,
            "AUTH_MODE": "dev",
            "AUTH_DEV_SECRET": BENCH_SECRET,
            "MEMORY_ENABLED": "true",
            "LOG_FORMAT": "json",
            **settings,
        }
    )
    options = ["--workers", str(workers)] if workers > 1 else []
    with uvicorn(asgi_app, env, log_dir / f"{name}.log", root, *options) as served:
        yield served


@contextmanager
def floor_process(stub: str, log_dir: Path) -> Iterator[tuple[str, int]]:
    """`scripts/bench/floor_app.py` (the required stack and nothing else) in one uvicorn
    process, started like `service`; yields (its URL, its pid)."""
    env = {**os.environ, "LLM_BASE_URL": stub, "LLM_API_KEY": "unused"}
    app = "scripts.bench.floor_app:app"
    with uvicorn(app, env, log_dir / "floor.log", ROOT, "--log-level", "warning") as served:
        yield served


@contextmanager
def io_floor_service(
    stub: str, database_url: str, log_dir: Path, name: str = "io_floor", pooler: str = ""
) -> Iterator[tuple[str, int]]:
    """`scripts/bench/io_floor_app.py` (the floor plus a turn's required database work) on
    `database_url`, started like `service`; yields (its URL, its pid)."""
    env = {
        **os.environ,
        "LLM_BASE_URL": stub,
        "LLM_API_KEY": "unused",
        "IO_FLOOR_DATABASE_URL": database_url,
        "IO_FLOOR_POOLER": pooler,
    }
    app = "scripts.bench.io_floor_app:app"
    log = log_dir / f"{name}.log"
    with uvicorn(app, env, log, ROOT, "--log-level", "warning") as served:
        yield served


@contextmanager
def uvicorn(
    asgi_app: str, env: dict[str, str], log: Path, root: Path, *options: str
) -> Iterator[tuple[str, int]]:
    """`asgi_app` under uvicorn on a free loopback port, importing from the code tree `root`;
    waits for its `/healthz`, yields (url, pid)."""
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "uvicorn",
        asgi_app,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-access-log",
        *options,
    ]
    path = [str(root)]  # the tree's own `app`, not an installed one
    if env.get(TRACE_ENV):
        path.append(str(HOOKS))  # its sitecustomize: tracemalloc on signals, from any tree
    env = {**env, "PYTHONPATH": os.pathsep.join(path)}
    url = f"http://127.0.0.1:{port}"
    with process(args, f"{url}/healthz", env, log, root) as pid:
        yield url, pid


def dev_token(sub: str) -> str:
    import jwt

    from app.identity.tokens import DEV_AUDIENCE, DEV_ISSUER

    now = int(time.time())
    claims = {
        "sub": sub,
        "iss": DEV_ISSUER,
        "aud": DEV_AUDIENCE,
        "iat": now,
        "nbf": now,
        "exp": now + 3600,
    }
    return jwt.encode(claims, BENCH_SECRET, algorithm="HS256")
