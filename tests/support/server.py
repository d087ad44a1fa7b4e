"""A real uvicorn server on a free loopback port, for tests that need real HTTP and SSE."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

# Every test server running now, for `settle`.
_running: set[uvicorn.Server] = set()


def settle(seconds: float = 1.0) -> None:
    """Wait, at most `seconds`, until no running test server is still handling a request: a
    server writes a request's access line after the response's last byte, so a test that ends
    at once would otherwise leave the line to be written after its output capture."""
    deadline = time.monotonic() + seconds
    while any(server.server_state.tasks for server in list(_running)):
        if time.monotonic() > deadline:
            return
        time.sleep(0.002)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def live_server(
    app: FastAPI, *, port: int | None = None, http: type[asyncio.Protocol] | str = "auto"
) -> Iterator[str]:
    """Serve `app` in a background thread; yields its base URL; stops it on exit. `http` is
    uvicorn's protocol (e.g. a `BoundedHttpProtocol` with a test's own bounds)."""
    with running_server(app, port=port, http=http) as (url, _stop):
        yield url


@contextmanager
def running_server(
    app: FastAPI,
    *,
    port: int | None = None,
    graceful_seconds: int = 5,
    http: type[asyncio.Protocol] | str = "auto",
) -> Iterator[tuple[str, Callable[[], None]]]:
    """`live_server` that also yields `stop`: the shutdown a signal starts (open responses get
    `graceful_seconds`, then their tasks are cancelled), returning once the server has ended."""
    port = port or free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_config=None,
        lifespan="on",
        timeout_graceful_shutdown=graceful_seconds,
        http=http,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=15)
        _running.discard(server)

    _running.add(server)
    try:
        yield f"http://127.0.0.1:{port}", stop
    finally:
        stop()
