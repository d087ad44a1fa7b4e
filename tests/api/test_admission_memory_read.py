"""A turn's memory is read on its admission's connection, once the admission (with the user's
message) has committed, on every database: the model sees the same memory; a refused turn
reads none; and a read that fails or hangs there costs the turn its memory, never its
admission (counted once, its slot taken and freed, its message stored once, its limits never
waived)."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import Connection, Engine, event

from app.memory import repository
from app.operators.limits import Caller
from tests.api.test_admission_write import chat, serving, turns_counted, user_rows
from tests.support.scripted import ScriptedModel, Text
from tests.support.tokens import dev_auth

LIMITS = {"user_max_streams": 2, "user_turns_per_minute": 50}
REMEMBERED = "Prefers answers in French."


class Checkouts:
    """The statements each pooled checkout of an engine ran, in checkout order."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.held: list[list[str]] = []
        self._current: dict[int, list[str]] = {}
        self._lock = threading.Lock()

    def _checkout(self, dbapi_connection: Any, *_args: Any) -> None:
        with self._lock:
            statements: list[str] = []
            self.held.append(statements)
            self._current[id(dbapi_connection)] = statements

    def _statement(self, connection: Connection, *args: Any) -> None:
        with self._lock:
            key = id(connection.connection.dbapi_connection)
            self._current.setdefault(key, []).append(str(args[1]).lower())

    @contextlib.contextmanager
    def watching(self) -> Iterator[Checkouts]:
        event.listen(self.engine.pool, "checkout", self._checkout)
        event.listen(self.engine, "before_cursor_execute", self._statement)
        try:
            yield self
        finally:
            event.remove(self.engine.pool, "checkout", self._checkout)
            event.remove(self.engine, "before_cursor_execute", self._statement)

    def holding(self, *tables: str) -> list[list[str]]:
        return [
            statements
            for statements in self.held
            if all(any(table in s for s in statements) for table in tables)
        ]


def remember(url: str, user: str) -> None:
    body = {"operations": [{"target": "user", "action": "add", "content": REMEMBERED}]}
    response = httpx.post(
        f"{url}/v1/memory/operations", json=body, headers=dev_auth(user), timeout=30
    )
    assert response.status_code == 200, response.text


def limit_checks_failed() -> float:
    return REGISTRY.get_sample_value("amem_limit_checks_failed_total") or 0.0


def prompt_of(model: ScriptedModel, call: int) -> str:
    return " ".join(str(message.get("content")) for message in model.requests[call].messages)


@pytest.mark.parametrize("continuing", [False, True], ids=["new conversation", "continuing"])
def test_memory_is_read_on_the_admissions_connection_after_its_commit(
    db_url: str, engine: Engine, continuing: bool
) -> None:
    """The admission's checkout then reads the caller's memory with the save mode, after the
    admission's COMMIT and outside its transaction: one worker-thread hop and checkout fewer
    per turn, and as a read: on SQLite it waits behind no writer. The model sees the memory
    either way."""
    model = ScriptedModel([Text("First."), Text("Second.")])
    user = f"early-{uuid.uuid4().hex[:8]}"
    with serving(db_url, model, **LIMITS) as (url, app):
        served: Engine = app.state.runtime.limits.engine
        remember(url, user)
        conversation = chat(url, user, {"message": "One."})["conversation_id"]
        body = {"message": "Two.", "conversation_id": conversation if continuing else None}
        with Checkouts(served).watching() as seen:
            start = chat(url, user, body)
    assert start["memory"]["status"] == "available"
    assert REMEMBERED in prompt_of(model, 1)
    # The memory read is the one statement joining the documents with the save mode. Since the
    # recall merge each /v1/chat turn also reads the `recall_chats` preference (also in
    # memory_preferences) on its own checkout, before its search: that is not the memory read.
    reads = seen.holding("agent_memory", "memory_preferences")
    assert len(reads) == 1, seen.held
    admission = seen.holding("limit_counters")
    assert len(admission) == 1, seen.held
    assert reads == admission, seen.held
    statements = admission[0]
    commit = max(i for i, s in enumerate(statements) if "limit_counters" in s or "slot" in s)
    read = next(i for i, s in enumerate(statements) if "memory_preferences" in s)
    assert read > commit, statements  # after the admission's statements, not among them
    # A read: on SQLite it begins without taking the writers' lock (`BEGIN IMMEDIATE`).
    assert not any("immediate" in s for s in statements[commit + 1 : read + 1]), statements
    assert any("insert" in s and "conversation_messages" in s for s in statements), statements
    model.assert_done()


def test_a_refused_turn_reads_no_memory(
    db_url: str, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memory read follows the admission's commit: a turn refused with 429 reads nothing."""
    model = ScriptedModel([Text("Answered.")])
    user = f"refused-{uuid.uuid4().hex[:8]}"
    reads: list[str] = []
    original = repository.load_snapshot_and_save_mode

    def counted(connection: Connection, user_id: str) -> Any:
        reads.append(user_id)
        return original(connection, user_id)

    monkeypatch.setattr(repository, "load_snapshot_and_save_mode", counted)
    with serving(db_url, model, user_max_streams=2, user_turns_per_minute=1) as (url, app):
        chat(url, user, {"message": "One."})
        assert reads == [user]
        refused = httpx.post(
            f"{url}/v1/chat", json={"message": "Two."}, headers=dev_auth(user), timeout=30
        )
        assert refused.status_code == 429, refused.text
        assert reads == [user]
        assert turns_counted(engine, user) == 1
    model.assert_done()


def _failing(error: BaseException | None, pause: float) -> Callable[..., Any]:
    original = repository.load_snapshot_and_save_mode

    def read(connection: Connection, user_id: str) -> Any:
        time.sleep(pause)
        if error is not None:
            raise error
        return original(connection, user_id)

    return read


@pytest.mark.parametrize(
    ("error", "pause"),
    [(RuntimeError("scripted: the memory read fails"), 0.0), (None, 1.5)],
    ids=["fails", "hangs past both deadlines"],
)
def test_a_memory_read_that_fails_costs_the_turn_its_memory_not_its_admission(
    db_url: str,
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
    error: BaseException | None,
    pause: float,
) -> None:
    """The read fails, or outlasts both the memory read's and the limit check's deadlines: the
    turn goes on without memory (`unavailable`), fail open; its admission stands as committed
    (counted once, never waived, its slot freed by its answer row) and its message is stored
    once, with the answer after it."""
    model = ScriptedModel([Text("Answered without memory.")])
    user = f"read-fails-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(repository, "load_snapshot_and_save_mode", _failing(error, pause))
    settings = {**LIMITS, "memory_read_timeout_seconds": 0.5, "limit_check_timeout_seconds": 0.8}
    with serving(db_url, model, **settings) as (url, app):
        store = app.state.runtime.limits
        waived_before = limit_checks_failed()
        start = chat(url, user, {"message": "Hello."})
        assert start["memory"]["status"] == "unavailable"
        assert start["transcript"]["status"] == "stored"
        assert [(role, status) for _turn, role, status in user_rows(engine, user)] == [
            ("user", "complete"),
            ("assistant", "complete"),
        ]
        assert turns_counted(engine, user) == 1
        assert limit_checks_failed() == waived_before  # the admission was checked
        deadline = time.monotonic() + 5
        while store.open_slots(Caller.user(user)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.open_slots(Caller.user(user)) == 0
    assert REMEMBERED not in prompt_of(model, 0)
    model.assert_done()
