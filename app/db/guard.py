"""Client-side bounds on database work in worker threads: a lease breaks a connection that is
held too long, and a fence keeps work that its caller abandoned from ever committing.

The database's own timeouts (statement, lock) bound a server that answers slowly. They cannot
bound a peer that has stopped answering altogether (a hung proxy, a frozen network path): the
worker thread then waits on its socket forever, holding a pooled connection and a thread. Two
mechanisms close that gap, installed on the engine by `install`:

- Every checkout takes a lease of `DB_OPERATION_TIMEOUT_SECONDS`. A watchdog thread breaks the
  transport of a connection whose lease has run out (the socket is shut down, or a SQLite
  statement interrupted), so the blocked call fails at once and the thread moves on. The pool's
  liveness ping runs under the lease too: it is done here instead of by `pool_pre_ping`, which
  would ping before any checkout hook could lease the connection.
- A caller that stops waiting (`app.db.deadline.within`) abandons the `Fence` that its worker
  threads see through a context variable. An abandoned worker cannot run a statement or emit
  COMMIT, and the connections it holds are broken right away, so its thread ends instead of
  waiting on the peer. A connection it obtains afterwards (a slow connect that completed late)
  goes back to the pool unused rather than being discarded. A COMMIT already sent when the
  caller gave up is in doubt, as for every database client; none is sent after.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Protocol

from sqlalchemy import Engine, event
from sqlalchemy.exc import InvalidatePoolError

LEASE_KEY = "app.guard.lease"
FRESH_KEY = "app.guard.fresh"
USED_KEY = "app.guard.used"
# A connection checked in this recently is not pinged at its next checkout: it has just done
# its work, and what ends a server connection from outside (a failover, a restart, an idle
# timeout) takes longer than this to happen and be noticed. One that dies inside the window
# fails its first statement instead, which invalidates the pool just as a failed ping does;
# the request then fails cleanly (503, or a turn's declared failure) and the next one
# reconnects. Under load nearly every checkout falls inside it: a round trip saved each.
PING_AFTER_IDLE_SECONDS = 1.0
# The watchdog thread ends after this long without leases, so a disposed engine leaves nothing.
IDLE_EXIT_SECONDS = 10.0


class WorkAbandonedError(RuntimeError):
    """The caller stopped waiting for this work: it may no longer use the database or commit."""


class Breaker(Protocol):
    # Whether `fire` leaves the connection unusable (a socket shut down), not only interrupted.
    spoils: bool

    def fire(self) -> None: ...

    def close(self) -> None: ...


class _SocketBreaker:
    """Shuts the connection's socket down from another thread: a blocked read returns at once.

    The descriptor is duplicated at checkout, so the shutdown reaches this connection's socket
    even if the driver has closed its own descriptor and the number was reused since.
    """

    spoils = True

    def __init__(self, fd: int) -> None:
        duplicate = os.dup(fd)
        try:
            self._socket = socket.socket(fileno=duplicate)
        except OSError:
            os.close(duplicate)
            raise

    def fire(self) -> None:
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._socket.close()


class _InterruptBreaker:
    """SQLite has no socket; `interrupt()` is its thread-safe way to stop a running statement."""

    spoils = False  # the interrupted statement fails; the connection stays usable

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def fire(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._connection.interrupt()

    def close(self) -> None:
        return None


def breaker_for(dbapi_connection: Any) -> Breaker | None:
    """How to break this driver's connection from another thread; None where the driver offers
    no handle (pyodbc: its query and login timeouts are the bound there)."""
    if isinstance(dbapi_connection, sqlite3.Connection):
        return _InterruptBreaker(dbapi_connection)
    with contextlib.suppress(Exception):
        fileno = getattr(dbapi_connection, "fileno", None)  # psycopg, psycopg2, mysqlclient
        if callable(fileno):
            return _SocketBreaker(int(fileno()))
        sock = getattr(dbapi_connection, "_sock", None)  # PyMySQL keeps its socket here
        if isinstance(sock, socket.socket):
            return _SocketBreaker(sock.fileno())
    return None


class Lease:
    """One checkout's right to hold its connection until `deadline`."""

    def __init__(self, watchdog: Watchdog, breaker: Breaker | None, deadline: float) -> None:
        self.watchdog = watchdog
        self.deadline = deadline
        self.fence: Fence | None = None
        self._breaker = breaker
        self._lock = threading.Lock()
        self._released = False
        self.broken = False
        self.spoils = breaker is not None and breaker.spoils

    def break_connection(self) -> None:
        with self._lock:
            if self._released or self.broken or self._breaker is None:
                return
            self.broken = True
            self._breaker.fire()

    def release(self) -> None:
        # No lock is held while calling out, so lock order never inverts with the watchdog's.
        self.watchdog.forget(self)
        if self.fence is not None:
            self.fence.detach(self)
        with self._lock:
            if self._released:
                return
            self._released = True
            if self._breaker is not None:
                self._breaker.close()


class Fence:
    """Shared by an awaiting caller and the worker threads it started (they see it through
    `current_fence`): once abandoned, a worker cannot check out a connection or commit, and the
    connections it holds are broken so that its thread ends instead of waiting on the peer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._abandoned = False
        self._leases: set[Lease] = set()

    @property
    def abandoned(self) -> bool:
        return self._abandoned

    def check(self, stage: str) -> None:
        if self._abandoned:
            raise WorkAbandonedError(f"database work abandoned by its caller ({stage})")

    def abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            leases = list(self._leases)
        for lease in leases:
            lease.break_connection()

    def attach(self, lease: Lease) -> bool:
        with self._lock:
            if self._abandoned:
                return False
            self._leases.add(lease)
            lease.fence = self
            return True

    def detach(self, lease: Lease) -> None:
        with self._lock:
            self._leases.discard(lease)


current_fence: ContextVar[Fence | None] = ContextVar("current_fence", default=None)


class Watchdog:
    """Breaks connections held past their lease; one thread per engine, started on demand.

    Every lease lasts `lease_seconds`, so a new one never expires before those already held:
    the thread sleeps until the earliest deadline it knows of (while idle, at most
    `lease_seconds`) and is woken only when it is not running. Waking it for each checkout
    (several per turn) cost a thread switch each, in the GIL handoff with the event loop."""

    def __init__(
        self, lease_seconds: float | None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.lease_seconds = lease_seconds
        self._clock = clock
        self._condition = threading.Condition()
        self._leases: set[Lease] = set()
        self._thread: threading.Thread | None = None
        self._wake_at = math.inf  # when the thread's current wait ends

    def lease(self, breaker: Breaker | None, fence: Fence | None) -> Lease:
        unbounded = self.lease_seconds is None
        deadline = math.inf if self.lease_seconds is None else self._clock() + self.lease_seconds
        lease = Lease(self, breaker, deadline)
        if fence is not None:
            # Refused once abandoned: then the fence's statement check stops the work instead.
            fence.attach(lease)
        if unbounded:  # migrations: only a fence can break this lease
            return lease
        with self._condition:
            self._leases.add(lease)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="db-lease-watchdog", daemon=True
                )
                self._thread.start()
            elif deadline < self._wake_at:  # the thread has not set its wait yet
                self._condition.notify()
        return lease

    def forget(self, lease: Lease) -> None:
        with self._condition:
            self._leases.discard(lease)

    def _run(self) -> None:
        assert self.lease_seconds is not None  # only bounded leases start the thread
        idle_since: float | None = None
        while True:
            with self._condition:
                now = self._clock()
                if not self._leases:
                    idle_since = now if idle_since is None else idle_since
                    idle_left = IDLE_EXIT_SECONDS - (now - idle_since)
                    if idle_left <= 0:
                        self._thread, self._wake_at = None, math.inf
                        return
                    # No longer than a lease: one taken meanwhile expires after this wait.
                    self._wake_at = now + min(idle_left, self.lease_seconds)
                    self._condition.wait(self._wake_at - now)
                    continue
                idle_since = None
                expired = {lease for lease in self._leases if lease.deadline <= now}
                if not expired:
                    self._wake_at = min(lease.deadline for lease in self._leases)
                    self._condition.wait(self._wake_at - now)
                    continue
                self._leases -= expired
            for lease in expired:  # outside the condition: breaking takes the lease's lock
                lease.break_connection()


def _end_lease(record: Any) -> bool:
    """End the checkout's lease; True when it broke its connection (its socket shut down)."""
    lease: Lease | None = record.record_info.pop(LEASE_KEY, None)
    if lease is None:
        return False
    lease.release()
    return lease.broken and lease.spoils


def install(engine: Engine, *, lease_seconds: float | None) -> Watchdog:
    """Lease every checkout (with the liveness ping inside the lease) and fence commits."""
    watchdog = Watchdog(lease_seconds)
    dialect = engine.dialect
    # A SQLite connection is a file handle in this process: there is no peer that could have
    # dropped it, so its checkout needs no liveness ping (one statement fewer per checkout).
    pings = dialect.name != "sqlite"

    @event.listens_for(engine, "connect")
    def _on_connect(_dbapi_connection: Any, record: Any) -> None:
        record.info[FRESH_KEY] = True  # just connected: no ping needed on its first checkout

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        _end_lease(record)  # the pool retries a checkout on the same record after a failed ping
        fence = current_fence.get()
        record.record_info[LEASE_KEY] = watchdog.lease(breaker_for(dbapi_connection), fence)
        if fence is not None and fence.abandoned:
            # Its caller has gone: no ping, and its first statement is refused (below), so the
            # connection, maybe just opened at some cost, goes back to the pool unused.
            return
        if record.info.pop(FRESH_KEY, False) or not pings:
            return
        if time.monotonic() - record.info.get(USED_KEY, -math.inf) < PING_AFTER_IDLE_SECONDS:
            return
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as error:
            _end_lease(record)
            if dialect.is_disconnect(error, dbapi_connection, None):
                # The pool discards this connection and every other one opened before now,
                # then opens a fresh one: after a failover (or a server restart) all the
                # pooled connections lead to the old server, and a checkout that found one
                # dead should not leave the next checkouts to find the others one by one.
                raise InvalidatePoolError("the pooled connection failed its ping") from error
            raise

    @event.listens_for(engine, "before_cursor_execute")
    def _on_statement(*_args: Any) -> None:
        fence = current_fence.get()
        if fence is not None:
            fence.check("statement")

    @event.listens_for(engine, "checkin")
    def _on_checkin(dbapi_connection: Any, record: Any) -> None:
        if _end_lease(record) and dbapi_connection is not None:
            # Broken between two statements (a fence given up while its thread ran Python):
            # nothing failed on it yet, and it would go back to the pool with its socket shut
            # down, to fail whoever takes it next. Closed here; the pool opens a new one.
            record.invalidate()
        record.info[USED_KEY] = time.monotonic()

    @event.listens_for(engine, "commit")
    def _on_commit(_connection: Any) -> None:
        fence = current_fence.get()
        if fence is not None:
            fence.check("commit")

    return watchdog
