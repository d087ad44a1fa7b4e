"""A turn's user message is stored in its admission's transaction, on every database and whatever
the limits (one path): the turn counted and its message stored commit together; a turn whose
client leaves before it runs leaves its message and its one assistant row, or neither, and frees
its slot; a shared write that fails leaves the turn to be admitted and stored the way it was
before, once; and a write retried after a failure that may have committed finds the message
instead of storing it twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Connection, Engine, event, func, select

from app.conversations.service import ConversationService, new_conversation_id
from app.db.schema import conversation_messages, conversations, limit_counters
from app.main import create_app
from app.operators.limits import Caller, LimitStore
from tests.support.apps import api_settings
from tests.support.scripted import ScriptedModel, Text
from tests.support.server import live_server
from tests.support.sse import first, iter_events
from tests.support.tokens import dev_auth

LIMITS = {"user_max_streams": 2, "user_turns_per_minute": 50}
TURN = "0" * 8 + "-0000-4000-8000-" + "0" * 12


def user_rows(engine: Engine, user: str) -> list[tuple[str, str, str]]:
    """(turn, role, status) of every message in the user's conversations, in order."""
    query = (
        select(
            conversation_messages.c.turn_id,
            conversation_messages.c.role,
            conversation_messages.c.status,
        )
        .join(conversations, conversations.c.id == conversation_messages.c.conversation_id)
        .where(conversations.c.user_id == user)
        .order_by(conversation_messages.c.id)
    )
    with engine.connect() as connection:
        return [(row[0], row[1], row[2]) for row in connection.execute(query)]


def turns_counted(engine: Engine, user: str) -> int:
    with engine.connect() as connection:
        counted = connection.execute(
            select(func.coalesce(func.sum(limit_counters.c.turns), 0)).where(
                limit_counters.c.kind == "user", limit_counters.c.caller == user
            )
        ).scalar_one()
    return int(counted)


class Transactions:
    """The statements of every transaction an engine commits, in commit order."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.committed: list[list[str]] = []
        self._open: dict[int, list[str]] = {}
        self._lock = threading.Lock()

    def _statement(self, connection: Connection, *args: Any) -> None:
        with self._lock:
            self._open.setdefault(id(connection), []).append(str(args[1]).lower())

    def _commit(self, connection: Connection) -> None:
        with self._lock:
            self.committed.append(self._open.pop(id(connection), []))

    def _rollback(self, connection: Connection) -> None:
        with self._lock:
            self._open.pop(id(connection), None)

    @contextlib.contextmanager
    def watching(self) -> Iterator[Transactions]:
        hooks: list[tuple[str, Callable[..., None]]] = [
            ("before_cursor_execute", self._statement),
            ("commit", self._commit),
            ("rollback", self._rollback),
        ]
        for name, hook in hooks:
            event.listen(self.engine, name, hook)
        try:
            yield self
        finally:
            for name, hook in hooks:
                event.remove(self.engine, name, hook)

    def writing(self, table: str) -> list[list[str]]:
        return [
            statements
            for statements in self.committed
            if any(table in s and not s.startswith("select") for s in statements)
        ]


@contextlib.contextmanager
def serving(db_url: str, model: ScriptedModel, **settings: Any) -> Iterator[tuple[str, FastAPI]]:
    app = create_app(api_settings(db_url, **settings), model_transport=model.transport())
    with live_server(app) as url:
        yield url, app


def chat(url: str, user: str, body: dict[str, Any]) -> dict[str, Any]:
    with (
        httpx.Client(base_url=url, timeout=30) as client,
        client.stream("POST", "/v1/chat", json=body, headers=dev_auth(user)) as response,
    ):
        assert response.status_code == 200, response.read()
        return first(list(iter_events(response)), "start").data


@pytest.mark.parametrize("continuing", [False, True], ids=["new conversation", "continuing"])
def test_the_turn_counted_and_its_message_commit_together(db_url: str, continuing: bool) -> None:
    """The transaction that counts the turn is the one that stores its user message, for a new
    conversation and a continuing one; the answer row follows in a transaction of its own."""
    model = ScriptedModel([Text("First."), Text("Second.")])
    user = f"shared-{uuid.uuid4().hex[:8]}"
    with serving(db_url, model, **LIMITS) as (url, app):
        engine = app.state.runtime.limits.engine
        conversation = chat(url, user, {"message": "One."})["conversation_id"]
        body = {"message": "Two.", "conversation_id": conversation if continuing else None}
        with Transactions(engine).watching() as seen:
            start = chat(url, user, body)
        rows, counted = user_rows(engine, user), turns_counted(engine, user)
    assert start["transcript"]["status"] == "stored"
    counting = seen.writing("limit_counters")
    assert len(counting) == 1, seen.committed
    assert any("conversation_messages" in s for s in counting[0]), counting[0]
    assert len(seen.writing("conversation_messages")) == 2  # the message's, the answer's
    assert [role for _turn, role, _status in rows] == ["user", "assistant"] * 2
    assert rows[2][0] == rows[3][0] == start["turn_id"]
    assert counted == 2
    model.assert_done()


@pytest.mark.parametrize("limits", [LIMITS, {}], ids=["limits on", "every limit off"])
def test_every_turn_stores_its_message_by_one_path_whatever_the_limits(
    db_url: str, limits: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn's start (`Turn.start`) stores the user message with the admission whatever the
    limits: the opening's own write, kept for an admission transaction that failed, is never
    reached (it fails the turn here), for a new and a continuing conversation; with every
    limit off nothing is counted."""

    async def never(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the opening stored the message: the admission did not")

    monkeypatch.setattr("app.agent.opening._store_message", never)
    model = ScriptedModel([Text("First."), Text("Second.")])
    user = f"one-path-{uuid.uuid4().hex[:8]}"
    with serving(db_url, model, **limits) as (url, app):
        engine = app.state.runtime.limits.engine
        first_start = chat(url, user, {"message": "One."})
        conversation = first_start["conversation_id"]
        second_start = chat(url, user, {"message": "Two.", "conversation_id": conversation})
        rows, counted = user_rows(engine, user), turns_counted(engine, user)
    assert first_start["transcript"]["status"] == second_start["transcript"]["status"] == "stored"
    assert second_start["conversation_id"] == conversation
    assert [(role, status) for _turn, role, status in rows] == [
        ("user", "complete"),
        ("assistant", "complete"),
    ] * 2
    assert counted == (2 if limits else 0)
    model.assert_done()


def test_a_client_gone_before_the_turn_runs_leaves_an_interrupted_row_and_a_free_slot(
    db_url: str,
) -> None:
    """The response's first send fails, so the turn never runs and the model is never called:
    the message stored with the admission is followed by the turn's one assistant row,
    `interrupted`, whose transaction frees the stream slot."""
    model = ScriptedModel([])  # any model call fails the test
    user = f"gone-{uuid.uuid4().hex[:8]}"
    app = create_app(api_settings(db_url, **LIMITS), model_transport=model.transport())
    headers = [
        (b"host", b"test"),
        (b"content-type", b"application/json"),
        *[(k.lower().encode(), v.encode()) for k, v in dev_auth(user).items()],
    ]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat",
        "raw_path": b"/v1/chat",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    incoming = [{"type": "http.request", "body": json.dumps({"message": "Hello?"}).encode()}]
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])
        if message["type"] == "http.response.start":
            raise OSError("scripted: the client has gone")

    async def request() -> None:
        with contextlib.suppress(Exception):
            await app(scope, receive, send)

    with TestClient(app) as client:
        client.portal.call(request)
        store: LimitStore = app.state.runtime.limits
        engine = store.engine
        assert sent[:1] == ["http.response.start"]
        stored = [(role, status) for _turn, role, status in user_rows(engine, user)]
        assert stored == [("user", "complete"), ("assistant", "interrupted")]
        assert store.open_slots(Caller.user(user)) == 0
    assert model.calls == 0


def test_a_shared_write_that_fails_leaves_the_turn_as_it_was_before(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the message cannot be stored with the admission, that transaction rolls back whole:
    the turn is admitted on its own, its opening stores the message, once, and the turn is
    counted once."""
    model = ScriptedModel([Text("Answered anyway.")])
    user = f"fallback-{uuid.uuid4().hex[:8]}"

    def failing_work(*_args: Any, **_kwargs: Any) -> Callable[[Connection], str]:
        def work(_connection: Connection) -> str:
            raise RuntimeError("scripted: the shared write fails")

        return work

    monkeypatch.setattr(ConversationService, "user_message", failing_work)
    with serving(db_url, model, **LIMITS) as (url, app):
        start = chat(url, user, {"message": "Hello."})
        engine = app.state.runtime.limits.engine
        assert start["transcript"]["status"] == "stored"
        assert [(role, status) for _turn, role, status in user_rows(engine, user)] == [
            ("user", "complete"),
            ("assistant", "complete"),
        ]
        assert turns_counted(engine, user) == 1
        assert app.state.runtime.limits.open_slots(Caller.user(user)) == 0
    model.assert_done()


@pytest.mark.parametrize("new", [True, False], ids=["new conversation", "continuing"])
def test_a_retried_write_finds_a_message_the_failed_try_committed(
    engine: Engine, new: bool
) -> None:
    """A shared write that failed may have committed all the same (a connection lost after its
    COMMIT was sent): the opening's write, told so, finds the message and stores nothing."""
    service = ConversationService(engine)
    user = f"retried-{uuid.uuid4().hex[:8]}"
    if new:
        conversation = new_conversation_id()
    else:
        conversation = asyncio.run(service.create(user, str(uuid.uuid4()), "Earlier."))
        assert conversation is not None
    work = service.user_message(user, TURN, "Hello.", conversation_id=conversation, new=new)
    with engine.begin() as connection:
        assert work(connection) == conversation
    if new:
        again = asyncio.run(
            service.create(user, TURN, "Hello.", conversation_id=conversation, retried=True)
        )
        assert again == conversation
    else:
        assert asyncio.run(service.append(conversation, TURN, "user", "Hello.", retried=True))
    assert [turn for turn, _role, _status in user_rows(engine, user)].count(TURN) == 1
