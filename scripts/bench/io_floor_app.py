"""The floor with a turn's required database work: `floor_app.py` plus, per turn, the statements
the design cannot do without, sent with the driver directly, for `turn_overhead.py --io-floor`.

What a turn must do on its database, whatever the code around it:

1. admit the turn and store the user's message durably before the model is asked (the
   per-user counter, the stream slot, the conversation and the message, one committed
   transaction: the limits hold across replicas, so they live in the database);
2. read the caller's memory (one statement);
3. store the answer durably before `done`, and release the stream slot with it (one committed
   transaction: the turn is over).

Here each is the smallest form of itself on the service's own database and its durability
settings (PostgreSQL: synchronous commit, a pool of native async connections; SQLite: WAL,
`synchronous=NORMAL`, `secure_delete`, one connection on one thread), on tables of its own.
No ORM, authentication, prompt, memory rules, logging or telemetry. What the service adds over
this app is what its code costs beyond the I/O it owes; what this app adds over `floor_app.py`
is what that I/O costs on this machine.

    IO_FLOOR_DATABASE_URL=postgresql://… uvicorn scripts.bench.io_floor_app:app
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from pydantic import BaseModel
from sse_starlette import EventSourceResponse

from scripts.bench.floor_app import deltas

URL = os.environ.get("IO_FLOOR_DATABASE_URL", "sqlite:///io-floor.sqlite3")
POOL_SIZE = int(os.environ.get("IO_FLOOR_POOL_SIZE", "5"))
# Behind a transaction pooler a server-side prepared statement may meet another connection.
PREPARE_THRESHOLD = None if os.environ.get("IO_FLOOR_POOLER") == "transaction" else 5

TABLES = (
    "CREATE TABLE IF NOT EXISTS io_floor_counters (user_id VARCHAR(64) PRIMARY KEY, turns INTEGER)",
    "CREATE TABLE IF NOT EXISTS io_floor_slots (id VARCHAR(36) PRIMARY KEY, user_id VARCHAR(64))",
    "CREATE TABLE IF NOT EXISTS io_floor_memory (user_id VARCHAR(64) PRIMARY KEY, body TEXT)",
    "CREATE TABLE IF NOT EXISTS io_floor_conversations "
    "(id VARCHAR(36) PRIMARY KEY, user_id VARCHAR(64), title TEXT)",
    "CREATE TABLE IF NOT EXISTS io_floor_messages (id VARCHAR(36) PRIMARY KEY, "
    "conversation_id VARCHAR(36) REFERENCES io_floor_conversations (id), role VARCHAR(16), "
    "content TEXT)",
)
# The counter as an upsert, in the dialects' own spelling (both support this one).
COUNT = (
    "INSERT INTO io_floor_counters (user_id, turns) VALUES ({p}, 1) "
    "ON CONFLICT (user_id) DO UPDATE SET turns = io_floor_counters.turns + 1"
)


class Store:
    """The three steps, each one round trip per statement plus its transaction's."""

    async def admit(self, user: str, slot: str, conversation: str, text: str) -> None:
        raise NotImplementedError

    async def read_memory(self, user: str) -> str | None:
        raise NotImplementedError

    async def store_answer(self, conversation: str, text: str, slot: str) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class PostgresStore(Store):
    """A fixed pool of psycopg's native async connections: no thread hop, no ORM."""

    def __init__(self, connections: list[Any]) -> None:
        self.idle: asyncio.Queue[Any] = asyncio.Queue()
        for connection in connections:
            self.idle.put_nowait(connection)

    @classmethod
    async def open(cls, url: str) -> PostgresStore:
        import psycopg

        conninfo = url.replace("postgresql+psycopg://", "postgresql://")
        connections = [
            await psycopg.AsyncConnection.connect(
                conninfo, autocommit=True, prepare_threshold=PREPARE_THRESHOLD
            )
            for _ in range(POOL_SIZE)
        ]
        async with connections[0].transaction():
            for statement in TABLES:
                await connections[0].execute(statement)
        return cls(connections)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        """A connection in autocommit: each statement its own transaction."""
        connection = await self.idle.get()
        try:
            yield connection
        finally:
            self.idle.put_nowait(connection)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        async with self.connection() as connection, connection.transaction():
            yield connection

    async def admit(self, user: str, slot: str, conversation: str, text: str) -> None:
        async with self.transaction() as db:
            await db.execute(
                "INSERT INTO io_floor_conversations VALUES (%s, %s, %s)", (conversation, user, text)
            )
            await db.execute(
                "INSERT INTO io_floor_messages VALUES (%s, %s, 'user', %s)",
                (str(uuid.uuid4()), conversation, text),
            )
            await db.execute(COUNT.format(p="%s"), (user,))
            await db.execute("INSERT INTO io_floor_slots VALUES (%s, %s)", (slot, user))

    async def read_memory(self, user: str) -> str | None:
        async with self.connection() as db:
            cursor = await db.execute(
                "SELECT body FROM io_floor_memory WHERE user_id = %s", (user,)
            )
            row = await cursor.fetchone()
        return None if row is None else str(row[0])

    async def store_answer(self, conversation: str, text: str, slot: str) -> None:
        async with self.transaction() as db:  # one statement: the slot's DELETE rides along
            await db.execute(
                "WITH released AS (DELETE FROM io_floor_slots WHERE id = %s) "
                "INSERT INTO io_floor_messages VALUES (%s, %s, 'assistant', %s)",
                (slot, str(uuid.uuid4()), conversation, text),
            )

    async def close(self) -> None:
        while not self.idle.empty():
            await self.idle.get_nowait().close()


class SqliteStore(Store):
    """One connection on one thread: SQLite writes one at a time anyway."""

    def __init__(self, path: str) -> None:
        self.thread = ThreadPoolExecutor(max_workers=1)
        self.path = path
        self.db: sqlite3.Connection | None = None

    async def open(self) -> SqliteStore:
        await self._run(self._connect)
        return self

    def _connect(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        for pragma in ("foreign_keys=ON", "journal_mode=WAL", "synchronous=NORMAL"):
            db.execute(f"PRAGMA {pragma}")
        db.execute("PRAGMA secure_delete=ON")
        for statement in TABLES:
            db.execute(statement)
        self.db = db

    async def _run(self, work: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.thread, work)

    def _transaction(self, *statements: tuple[str, tuple[Any, ...]]) -> None:
        assert self.db is not None
        self.db.execute("BEGIN IMMEDIATE")
        try:
            for sql, values in statements:
                self.db.execute(sql, values)
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    async def admit(self, user: str, slot: str, conversation: str, text: str) -> None:
        await self._run(
            lambda: self._transaction(
                ("INSERT INTO io_floor_conversations VALUES (?, ?, ?)", (conversation, user, text)),
                (
                    "INSERT INTO io_floor_messages VALUES (?, ?, 'user', ?)",
                    (str(uuid.uuid4()), conversation, text),
                ),
                (COUNT.format(p="?"), (user,)),
                ("INSERT INTO io_floor_slots VALUES (?, ?)", (slot, user)),
            )
        )

    async def read_memory(self, user: str) -> str | None:
        def read() -> str | None:
            assert self.db is not None
            row = self.db.execute(
                "SELECT body FROM io_floor_memory WHERE user_id = ?", (user,)
            ).fetchone()
            return None if row is None else str(row[0])

        result: str | None = await self._run(read)
        return result

    async def store_answer(self, conversation: str, text: str, slot: str) -> None:
        await self._run(
            lambda: self._transaction(
                (
                    "INSERT INTO io_floor_messages VALUES (?, ?, 'assistant', ?)",
                    (str(uuid.uuid4()), conversation, text),
                ),
                ("DELETE FROM io_floor_slots WHERE id = ?", (slot,)),
            )
        )

    async def close(self) -> None:
        await self._run(lambda: self.db.close() if self.db else None)
        self.thread.shutdown()


store: Store | None = None


@asynccontextmanager
async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
    global store
    if URL.startswith("sqlite"):
        store = await SqliteStore(URL.split("///", 1)[1]).open()
    else:
        store = await PostgresStore.open(URL)
    try:
        yield
    finally:
        await store.close()


app = FastAPI(lifespan=lifespan)


class ChatBody(BaseModel):
    message: str


async def turn(
    db: Store, user: str, conversation: str, slot: str, message: str
) -> AsyncIterator[dict[str, Any]]:
    """Steps 2 and 3 around the floor's relay; step 1 ran before the response started."""
    await db.read_memory(user)
    answer: list[str] = []
    async for event in deltas(message):
        if event["event"] == "done":
            await db.store_answer(conversation, "".join(answer), slot)
        else:
            answer.append(json.loads(event["data"])["text"])
        yield event


@app.post("/v1/chat")
async def chat(body: ChatBody, request: Request) -> EventSourceResponse:
    assert store is not None
    # The caller's bearer token stands for its user (no authentication here): one counter and
    # one slot row per concurrent client, as the service's per-user rows.
    user = hashlib.sha256(request.headers.get("authorization", "").encode()).hexdigest()[:32]
    slot, conversation = str(uuid.uuid4()), str(uuid.uuid4())
    # A refusal would be a 429 before any byte, with the message rolled back.
    await store.admit(user, slot, conversation, body.message)
    return EventSourceResponse(turn(store, user, conversation, slot, body.message))


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}
