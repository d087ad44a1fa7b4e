"""A real uvicorn server on a free loopback port, for tests that need real HTTP and SSE."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI


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
    port = port or free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_config=None,
        lifespan="on",
        timeout_graceful_shutdown=5,
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
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
