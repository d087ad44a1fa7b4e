"""The end of a turn, over real HTTP on every dialect: only a final answer commits, a staged edit
lands only on the entry the model saw, the memory event follows the commit at once, and every
turn keeps exactly one assistant row whose status says what happened, whenever the client
leaves. Races are driven with gates the test opens, never with sleeps."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, event

from app.agent.turn import Turn
from app.db.schema import feature_flags
from app.main import create_app
from app.memory.flags import write_flag
from app.memory.rules import Operation
from app.memory.service import CommitResult, MemoryService
from app.offline.wire import ChatRequest
from tests.support.apps import api_settings, memory_rows
from tests.support.databases import stored
from tests.support.gates import Gates
from tests.support.scripted import HeldText, ScriptedModel, Text, memory_call
from tests.support.server import live_server
from tests.support.sse import Event, first, iter_events, names
from tests.support.tokens import dev_auth
from tests.support.transcripts import GATE, HeldTranscript
from tests.support.waiting import wait_for
from tests.telemetry.capture import RecordingHandler

FACT = {"target": "user", "action": "add", "content": "The user prefers short answers."}
ANSWER = "Saved. I will keep my answers short from now on."


@pytest.fixture
def turns(monkeypatch: pytest.MonkeyPatch) -> list[Turn]:
    """Every Turn the server builds, so a test can see when the server noticed a disconnect."""
    made: list[Turn] = []
    original = Turn.__init__

    def recording(self: Turn, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(Turn, "__init__", recording)
    return made


@pytest.fixture
def turn_outcomes() -> Iterator[Callable[[], list[str]]]:
    """The `outcome` of each `turn.finished` log event."""
    handler = RecordingHandler()
    root = logging.getLogger()
    root.addHandler(handler)

    def outcomes() -> list[str]:
        return [
            str(record.msg["outcome"])
            for record in handler.records
            if isinstance(record.msg, dict) and record.msg.get("event") == "turn.finished"
        ]

    try:
        yield outcomes
    finally:
        root.removeHandler(handler)


@contextmanager
def server(db_url: str, model: ScriptedModel, **overrides: Any) -> Iterator[tuple[str, Any]]:
    app = create_app(api_settings(db_url, **overrides), model_transport=model.transport())
    with live_server(app) as url:
        yield url, app.state.runtime


def read_until(
    url: str, user: str, body: dict[str, Any], stop: Callable[[Event], bool]
) -> list[Event]:
    """Stream a turn and leave (close the connection) right after the first event `stop`
    accepts; returns the events seen."""
    seen: list[Event] = []
    with (
        httpx.Client(base_url=url, timeout=30) as client,
        client.stream("POST", "/v1/chat", json=body, headers=dev_auth(user)) as response,
    ):
        assert response.status_code == 200, response.read()
        for event in iter_events(response):
            seen.append(event)
            if stop(event):
                break
    return seen


def assistant_rows(url: str, user: str, conversation_id: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{url}/v1/conversations/{conversation_id}", headers=dev_auth(user))
    assert response.status_code == 200, response.text
    return [m for m in response.json()["messages"] if m["role"] == "assistant"]


def user_id() -> str:
    return f"turn-end-{uuid.uuid4().hex[:10]}"


# -- a cut before the commit commits nothing, though the model would have -------------------


@pytest.mark.parametrize("cut", [None, "after_tool", "mid_answer", "at_the_last_chunk"])
def test_a_cut_before_the_commit_commits_nothing_though_the_model_would_complete(
    engine: Engine, db_url: str, cut: str | None
) -> None:
    """The model stages a fact, then streams an answer held before its finishing chunk. With no
    cut (the control) the test opens the gate and the turn commits: the script would commit.
    With a cut before the commit the server cancels the turn; only then is the gate opened, and
    still nothing is stored and the one assistant row is `interrupted`."""
    gates = Gates()
    user = user_id()
    model = ScriptedModel([memory_call(FACT), HeldText(ANSWER, gates, "answer")])
    with server(db_url, model) as (url, _runtime):

        def stop(event: Event) -> bool:
            if cut is None and event.event == "tool":
                gates.release("answer")
            if cut == "after_tool":
                return event.event == "tool"
            if cut == "mid_answer":
                return event.event == "delta"
            if cut == "at_the_last_chunk" and event.event == "delta":
                # Leave once the server holds the answer before its finishing chunk (the last
                # moment before the commit); the SSE reader lags one event behind the bytes.
                wait_for(lambda: "answer" in gates.held, "the answer held at its last chunk")
                return True
            return False

        events = read_until(url, user, {"message": "remember that"}, stop)
        conversation_id = events[0].data["conversation_id"]
        if cut is None:
            assert names(events)[-1] == "done"
            assert first(events, "memory").data["outcome"] == "committed"
            assert stored(engine, user).user == (FACT["content"],)
            assert [r["status"] for r in assistant_rows(url, user, conversation_id)] == ["complete"]
            return
        wait_for(lambda: assistant_rows(url, user, conversation_id), "the turn's last row")
        gates.release("answer")  # the model would finish now, if the turn were still alive
        assert "answer" not in gates.passed
        assert [r["status"] for r in assistant_rows(url, user, conversation_id)] == ["interrupted"]
    assert memory_rows(engine, user) == 0
    assert "memory" not in names(events)


# -- a client that leaves after the commit: the turn succeeded ---------------------------------


def test_a_client_that_leaves_after_the_memory_event_keeps_one_complete_row(
    engine: Engine, db_url: str, turns: list[Turn], turn_outcomes: Callable[[], list[str]]
) -> None:
    """The memory event is sent as soon as the commit returns; the client leaves right then,
    while the transcript is being written. The turn committed, so it stays one `complete`
    assistant row (never a second `interrupted` one) and the log says it finished."""
    gates = Gates()
    user = user_id()
    model = ScriptedModel([memory_call(FACT), Text(ANSWER)])
    with server(db_url, model) as (url, runtime):
        runtime.conversations = HeldTranscript(runtime.engine, gates)

        def held_at_the_transcript(event: Event) -> bool:
            # The reader lags one event behind the bytes, so it waits for the server's side:
            # the commit returned, its memory event went out, the row's write is held.
            if event.event != "delta":
                return False
            wait_for(lambda: GATE in gates.held, "the transcript write being held")
            return True

        events = read_until(url, user, {"message": "remember that"}, held_at_the_transcript)
        assert stored(engine, user).user == (FACT["content"],)  # committed before the cut
        wait_for(lambda: turns and turns[0].cancel_event.is_set(), "the server seeing the cut")
        gates.release(GATE)
        conversation_id = events[0].data["conversation_id"]
        wait_for(lambda: "stop" in turn_outcomes(), "the turn's end")
        rows = assistant_rows(url, user, conversation_id)
    assert [(r["status"], r["content"]) for r in rows] == [("complete", ANSWER)]
    assert stored(engine, user).user == (FACT["content"],)
    assert turn_outcomes() == ["stop"]


def test_the_memory_event_reaches_the_client_before_the_transcript_is_written(
    engine: Engine, db_url: str
) -> None:
    """The memory event follows the commit at once: while the assistant row's write is held
    at its gate, the client already holds the `memory` event's bytes (a turn that wrote the
    transcript first would leave a client that goes in that window without it). Raw bytes are
    read, so no line buffering can delay what the server sent."""
    gates = Gates()
    user = user_id()
    model = ScriptedModel([memory_call(FACT), Text(ANSWER)])
    received = bytearray()
    with server(db_url, model) as (url, runtime):
        runtime.conversations = HeldTranscript(runtime.engine, gates)

        def read() -> None:
            with (
                httpx.Client(base_url=url, timeout=60) as client,
                client.stream(
                    "POST", "/v1/chat", json={"message": "remember that"}, headers=dev_auth(user)
                ) as response,
            ):
                for chunk in response.iter_bytes():
                    received.extend(chunk)

        reader = threading.Thread(target=read)
        reader.start()
        try:
            wait_for(lambda: GATE in gates.held, "the assistant row's write being held")
            wait_for(
                lambda: b"event: memory" in received,
                "the memory event while the assistant row's write is held",
            )
        finally:
            gates.release(GATE)
            reader.join(60)
    assert b"event: done" in received
    assert stored(engine, user).user == (FACT["content"],)
    model.assert_done()


class HeldCommit(MemoryService):
    """A commit that has landed but not yet returned to the turn, until the test says so."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.landed = threading.Event()
        self.go_on = threading.Event()

    def commit_operations(self, *args: Any, **kwargs: Any) -> CommitResult:
        result = super().commit_operations(*args, **kwargs)
        self.landed.set()
        assert self.go_on.wait(30), "the test never let the commit return"
        return result


def test_a_commit_that_lands_as_the_client_leaves_makes_a_complete_turn(
    engine: Engine, db_url: str, turns: list[Turn], turn_outcomes: Callable[[], list[str]]
) -> None:
    """The cancellation reaches the turn after its worker passed the last check: the commit
    landed. The turn reports that truth: one `complete` row, the memory stored, a finished turn
    in the log (not a cancelled one with a commit behind its back)."""
    user = user_id()
    model = ScriptedModel([memory_call(FACT), Text(ANSWER)])
    with server(db_url, model) as (url, runtime):
        held = HeldCommit(runtime.engine)
        runtime.memory = held
        events = read_until(
            url,
            user,
            {"message": "remember that"},
            lambda event: event.event == "delta" and held.landed.wait(30),
        )
        wait_for(lambda: turns and turns[0].cancel_event.is_set(), "the server seeing the cut")
        held.go_on.set()
        wait_for(lambda: turn_outcomes(), "the turn's end")
        conversation_id = events[0].data["conversation_id"]
        wait_for(lambda: assistant_rows(url, user, conversation_id), "the turn's last row")
        rows = assistant_rows(url, user, conversation_id)
    assert "memory" not in names(events)
    assert [r["status"] for r in rows] == ["complete"]
    assert stored(engine, user).user == (FACT["content"],)
    assert turn_outcomes() == ["stop"]


# -- edits are pinned to what the model saw ---------------------------------------------------


def concurrent_writer(engine: Engine, user: str, *operations: Operation) -> Any:
    """A model step that commits `operations` for `user` through another path (as the memory
    API or another replica would) while the turn is between staging and commit."""

    async def step(_request: ChatRequest) -> Text:
        await asyncio.to_thread(MemoryService(engine).commit_operations, user, [operations])
        return Text("Saved.")

    return step


def test_a_staged_edit_never_lands_on_an_entry_the_model_did_not_see(
    engine: Engine, db_url: str
) -> None:
    """Staged: replace match "tea" against "The user likes tea.". Meanwhile another writer turns
    it into coffee and adds a tea-ceremony entry. The commit refuses the whole batch as
    `stale_match`; the other writer's entries are untouched."""
    user = user_id()
    MemoryService(engine).commit_operations(
        user, [[Operation("user", "add", content="The user likes tea.")]]
    )
    model = ScriptedModel(
        [
            memory_call(
                {"target": "memory", "action": "add", "content": "Staged beside the edit."},
                {
                    "target": "user",
                    "action": "replace",
                    "match": "tea",
                    "content": "The user likes green tea.",
                },
            ),
            concurrent_writer(
                engine,
                user,
                Operation("user", "replace", match="tea", content="The user likes coffee."),
                Operation("user", "add", content="The user is a tea ceremony teacher."),
            ),
        ]
    )
    with server(db_url, model) as (url, _runtime):
        events = read_until(url, user, {"message": "I like green tea"}, lambda _e: False)
    memory = first(events, "memory").data
    assert (memory["outcome"], memory["reason"]) == ("failed", "stale_match")
    assert names(events)[-1] == "done"
    after = stored(engine, user)
    assert after.user == ("The user likes coffee.", "The user is a tea ceremony teacher.")
    assert after.memory == ()
    model.assert_done()


def test_a_match_made_ambiguous_by_another_writer_still_edits_the_entry_the_model_saw(
    engine: Engine, db_url: str
) -> None:
    """Concurrent adds of other facts still land, and an edit whose substring now also fits the
    newcomer resolves to the entry the model saw."""
    user = user_id()
    MemoryService(engine).commit_operations(
        user, [[Operation("user", "add", content="The user likes tea.")]]
    )
    model = ScriptedModel(
        [
            memory_call({"target": "user", "action": "remove", "match": "likes"}),
            concurrent_writer(
                engine, user, Operation("user", "add", content="The user likes jazz.")
            ),
        ]
    )
    with server(db_url, model) as (url, _runtime):
        events = read_until(url, user, {"message": "forget that I like tea"}, lambda _e: False)
    assert first(events, "memory").data["outcome"] == "committed"
    assert stored(engine, user).user == ("The user likes jazz.",)
    model.assert_done()


def test_a_batch_that_changes_nothing_reports_none(engine: Engine, db_url: str) -> None:
    """Repeating a remembered fact stages a no-op: the memory event says `none`, not
    `committed`, so a client never claims a change that did not happen."""
    user = user_id()
    MemoryService(engine).commit_operations(
        user, [[Operation("user", "add", content=FACT["content"])]]
    )
    model = ScriptedModel([memory_call(FACT), Text("Already saved.")])
    with server(db_url, model) as (url, _runtime):
        events = read_until(url, user, {"message": "remember that"}, lambda _e: False)
    memory = first(events, "memory").data
    assert memory == {
        "outcome": "none",
        "user_characters": len(FACT["content"]),
        "memory_characters": 0,
    }
    model.assert_done()


# -- the flag ----------------------------------------------------------------------------------


def test_while_the_flag_is_off_memory_reads_as_disabled_with_its_stored_counts(
    engine: Engine, db_url: str
) -> None:
    """Switching memory off keeps entries readable (`status: disabled`), and a turn's memory
    event reports the stored counts rather than zeros; nothing is offered to the model."""
    user = user_id()
    MemoryService(engine).commit_operations(
        user, [[Operation("user", "add", content=FACT["content"])]]
    )
    model = ScriptedModel([Text("Hello.")])
    with server(db_url, model) as (url, _runtime):
        switched = httpx.put(
            f"{url}/v1/admin/flags/memory",
            json={"enabled": False},
            headers=dev_auth("ops", ["operator"]),
        )
        assert switched.status_code == 200, switched.text
        body = httpx.get(f"{url}/v1/memory", headers=dev_auth(user)).json()
        events = read_until(url, user, {"message": "hello"}, lambda _e: False)
    assert body["status"] == "disabled"
    assert body["user"]["entries"] == [FACT["content"]]
    assert first(events, "start").data["memory"] == {"status": "disabled"}
    assert first(events, "memory").data == {
        "outcome": "none",
        "user_characters": len(FACT["content"]),
        "memory_characters": 0,
    }
    assert model.requests[0].tool_names == {"conversation_search"}  # no memory tool
    assert FACT["content"] not in model.requests[0].system_text()
    model.assert_done()


def test_memory_switched_off_during_a_turn_discards_what_it_staged(
    engine: Engine, db_url: str
) -> None:
    """Another replica's operator switches memory off while a turn that staged an edit is still
    answering. The flag is read again at the commit point, from no cache older than the turn
    (this process caches the flag for a minute here), so nothing is committed: `memory: none`."""
    user = user_id()

    async def operator_switches_off_elsewhere(_request: ChatRequest) -> Text:
        await asyncio.to_thread(write_flag, engine, "memory", False, "another-replica")
        return Text(ANSWER)

    model = ScriptedModel([memory_call(FACT), operator_switches_off_elsewhere])
    with server(db_url, model, flag_cache_seconds=60) as (url, _runtime):
        events = read_until(url, user, {"message": "remember that"}, lambda _e: False)
    assert first(events, "start").data["memory"] == {"status": "available"}
    assert first(events, "tool").data["outcome"] == "staged"
    assert first(events, "memory").data["outcome"] == "none"
    assert names(events)[-1] == "done"
    assert memory_rows(engine, user) == 0
    model.assert_done()


def test_a_flag_unreadable_at_the_commit_point_discards_what_was_staged(
    engine: Engine, db_url: str
) -> None:
    """The flag was on when the turn began and the turn staged an edit; at the commit point the
    flags table cannot be read. Fail-closed: nothing is committed (`failed`, reason
    `memory_unavailable`), never the cached "on" nor MEMORY_ENABLED, and the answer still
    ends with `done`."""
    user = user_id()
    unreadable = threading.Event()

    async def flags_table_breaks(_request: ChatRequest) -> Text:
        unreadable.set()
        return Text(ANSWER)

    model = ScriptedModel([memory_call(FACT), flags_table_breaks])
    with server(db_url, model, flag_cache_seconds=60) as (url, runtime):

        @event.listens_for(runtime.engine, "before_cursor_execute")
        def _refuse_flag_reads(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            if unreadable.is_set() and feature_flags.name in statement:
                raise RuntimeError("the flags table cannot be read")

        events = read_until(url, user, {"message": "remember that"}, lambda _e: False)
    assert first(events, "start").data["memory"] == {"status": "available"}
    assert first(events, "tool").data["outcome"] == "staged"
    memory = first(events, "memory").data
    assert (memory["outcome"], memory["reason"]) == ("failed", "memory_unavailable")
    assert names(events)[-1] == "done"
    assert memory_rows(engine, user) == 0
    model.assert_done()


@pytest.mark.parametrize("delete_it", [False, True], ids=["control", "conversation_deleted"])
def test_a_turn_whose_answer_cannot_be_stored_ends_with_an_error_not_done(
    engine: Engine, db_url: str, delete_it: bool
) -> None:
    """`done` promises the conversation holds the turn. The model's answer is held; meanwhile
    the conversation is deleted, so the answer row cannot be stored: the turn reports its
    memory commit as it happened, then ends with `error` `transcript_unavailable`, never
    `done`. The control (nothing deleted) ends with `done`."""
    gates = Gates()
    user = user_id()
    model = ScriptedModel([memory_call(FACT), HeldText(ANSWER, gates, "answer")])
    with server(db_url, model) as (url, _runtime):

        def stop(event: Event) -> bool:
            if event.event == "start":
                if delete_it:
                    conversation = event.data["conversation_id"]
                    response = httpx.delete(
                        f"{url}/v1/conversations/{conversation}", headers=dev_auth(user)
                    )
                    assert response.status_code == 204, response.text
                gates.release("answer")
            return False

        events = read_until(url, user, {"message": "Short answers, please."}, stop)
    assert first(events, "memory").data["outcome"] == "committed"
    if delete_it:
        assert names(events)[-1] == "error"
        assert events[-1].data["code"] == "transcript_unavailable"
    else:
        assert names(events)[-1] == "done"
    assert stored(engine, user).user == ("The user prefers short answers.",)
