"""A TCP proxy in front of a real database server that can freeze and thaw, for hang tests.

Frozen, it behaves like a peer that has stopped answering without closing anything: new
connections are accepted and never answered, and established ones stop forwarding in both
directions, with every byte (and every close) held back. Thawed, it delivers what it held, in
order, and forwards as usual again. A client that gives up during the freeze therefore finds,
after the thaw, that anything it had sent still reaches the server: nothing it wrote is lost by
the proxy, so a test that finds nothing committed proves the client never sent a COMMIT.

Slowed (`slow(low, high)`), it holds each chunk a random time in that range before forwarding
it, in order, in both directions: a database that answers, late.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import make_url

CHUNK = 65536


class FreezableProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.connections = 0  # accepted so far
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="db-proxy", daemon=True)
        self._open: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._delay: tuple[float, float] | None = None

    # -- control, from the test's thread ---------------------------------------------------------

    def _call(self, coroutine: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(timeout=30)

    def start(self) -> None:
        self._thread.start()
        self._call(self._start())

    def freeze(self) -> None:
        self._call(self._set_open(False))

    def thaw(self) -> None:
        self._call(self._set_open(True))

    def slow(self, low: float, high: float) -> None:
        """Hold each chunk `low` to `high` seconds (at random) before forwarding it."""
        self._delay = (low, high)

    def fast(self) -> None:
        self._delay = None

    def stop(self) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    def url_for(self, database_url: str) -> str:
        """`database_url` with its host and port replaced by this proxy's."""
        url = make_url(database_url).set(host="127.0.0.1", port=self.port)
        return url.render_as_string(hide_password=False)

    # -- the proxy, on its own event loop ---------------------------------------------------------

    async def _start(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _set_open(self, value: bool) -> None:
        assert self._open is not None
        if value:
            self._open.set()
        else:
            self._open.clear()

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _accept(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None and self._open is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        self.connections += 1
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            await self._open.wait()  # frozen: accepted, never answered
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
            await asyncio.gather(
                self._pump(client_reader, upstream_writer),
                self._pump(upstream_reader, client_writer),
            )
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for writer in (client_writer, upstream_writer):
                if writer is not None:
                    writer.close()
            self._tasks.discard(task)  # type: ignore[arg-type]

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._open is not None
        try:
            while True:
                data = await reader.read(CHUNK)
                await self._open.wait()  # frozen: hold this chunk (or this close) until thawed
                delay = self._delay
                if delay is not None:
                    await asyncio.sleep(random.uniform(*delay))  # noqa: S311 - not a secret
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            # One side closed: close the other, so each end sees what the peer did.
            writer.close()


@contextmanager
def freezable_proxy(database_url: str) -> Iterator[FreezableProxy]:
    """A running proxy in front of the server named by `database_url` (thawed on exit)."""
    url = make_url(database_url)
    port = url.port or {"postgresql": 5432, "mysql": 3306, "mariadb": 3306}[url.get_backend_name()]
    proxy = FreezableProxy(url.host or "127.0.0.1", port)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.thaw()
        proxy.stop()
