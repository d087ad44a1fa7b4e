"""The event stream of `POST /v1/chat`, asserted exactly for the main paths, over real SSE."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import Engine, insert

from app.db.schema import agent_memory
from app.db.writers import maintenance
from tests.support.apps import api_settings, memory_rows
from tests.support.databases import stored
from tests.support.scripted import ScriptedModel, Text, memory_call, serve_with_model
from tests.support.sse import first, post_chat, text_of, without_deltas
from tests.support.tokens import dev_auth

FACT = {"target": "user", "action": "add", "content": "The user prefers short answers."}


def test_plain_answer(db: Engine, sqlite_url: str) -> None:
    """start, delta..., memory(none), done(stop); deltas arrive piece by piece."""
    model = ScriptedModel([Text("Hello there, how can I help?")])
    with serve_with_model(api_settings(sqlite_url), model) as url:
        response, events = post_chat(url, dev_auth("alice"), {"message": "hi"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert without_deltas(events) == ["start", "delta", "memory", "sources", "done"]
    assert len([e for e in events if e.event == "delta"]) == 6
    assert text_of(events) == "Hello there, how can I help?"
    start = events[0].data
    assert start["memory"] == {"status": "available"} and start["conversation_id"]
    assert first(events, "memory").data == {
        "outcome": "none",
        "user_characters": 0,
        "memory_characters": 0,
    }
    assert events[-1].data == {"finish_reason": "stop"}
    model.assert_done()


def test_staged_tool_call_commits_after_the_answer(db: Engine, sqlite_url: str) -> None:
    """start, tool(staged), delta, memory(committed with counts), done; stored afterwards."""
    model = ScriptedModel([memory_call(FACT), Text("Saved.")])
    with serve_with_model(api_settings(sqlite_url), model) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "remember that"})
    assert without_deltas(events) == ["start", "tool", "delta", "memory", "sources", "done"]
    assert first(events, "tool").data == {
        "name": "memory_update",
        "outcome": "staged",
        "operation_count": 1,
    }
    assert first(events, "memory").data == {
        "outcome": "committed",
        "user_characters": len(FACT["content"]),
        "memory_characters": 0,
    }
    assert stored(db, "alice").user == (FACT["content"],)
    # The model saw the short JSON result, which never echoes the entry.
    tool_message = model.requests[1].messages[-1]
    assert tool_message["role"] == "tool" and FACT["content"] not in tool_message["content"]
    model.assert_done()


def test_rejected_tool_call_commits_nothing(db: Engine, sqlite_url: str) -> None:
    """start, tool(rejected), delta, memory(none), done; the reason went to the model."""
    bad = {"target": "user", "action": "remove", "match": "nothing like this"}
    model = ScriptedModel([memory_call(bad), Text("I could not save that.")])
    with serve_with_model(api_settings(sqlite_url), model) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "forget x"})
    assert without_deltas(events) == ["start", "tool", "delta", "memory", "sources", "done"]
    assert first(events, "tool").data["outcome"] == "rejected"
    assert first(events, "memory").data["outcome"] == "none"
    assert '"match_not_found"' in model.requests[1].messages[-1]["content"]
    assert memory_rows(db) == 0
    model.assert_done()


def test_flag_off_offers_no_tool(db: Engine, sqlite_url: str) -> None:
    """Status disabled: no memory tool in the request, no block in the prompt, memory(none)."""
    with db.begin() as connection, maintenance(connection):
        connection.execute(
            insert(agent_memory).values(
                user_id="alice", memory_type="user", content="The user likes sentinel-off."
            )
        )
    model = ScriptedModel([Text("Hi.")])
    settings = api_settings(sqlite_url, memory_enabled=False)
    with serve_with_model(settings, model) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "hi"})
    assert without_deltas(events) == ["start", "delta", "memory", "sources", "done"]
    assert events[0].data["memory"] == {"status": "disabled"}
    # Only conversation search, which reads transcripts, not memory.
    assert model.requests[0].tool_names == {"conversation_search"}
    assert "sentinel-off" not in model.requests[0].system_text()
    model.assert_done()


def test_read_failure_answers_unavailable_and_writes_nothing(db: Engine, sqlite_url: str) -> None:
    """An unreadable row (unknown schema_version): status unavailable, empty block, the tool
    answers 'memory unavailable', and nothing is written for anyone."""
    with db.begin() as connection, maintenance(connection):
        connection.execute(
            insert(agent_memory).values(
                user_id="alice",
                memory_type="memory",
                content="future format sentinel-v2",
                schema_version=2,
            )
        )
    model = ScriptedModel([memory_call(FACT), Text("Memory is unavailable.")])
    with serve_with_model(api_settings(sqlite_url), model) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "remember that"})
    assert without_deltas(events) == ["start", "tool", "delta", "memory", "sources", "done"]
    assert events[0].data["memory"] == {"status": "unavailable"}
    assert first(events, "tool").data["outcome"] == "unavailable"
    assert first(events, "memory").data["outcome"] == "none"
    # Invariant: the counts are the stored memory's or none at all; an unreadable memory's
    # are unknown (null), never zeros that claim it is empty.
    memory_event = first(events, "memory").data
    assert (memory_event["user_characters"], memory_event["memory_characters"]) == (None, None)
    assert "sentinel-v2" not in model.requests[0].system_text()
    assert "memory unavailable: nothing was saved" in model.requests[1].messages[-1]["content"]
    assert memory_rows(db) == 1  # only the unreadable row, untouched
    model.assert_done()


@pytest.mark.parametrize(
    ("body", "status"),
    [
        pytest.param({"message": ""}, 422, id="empty"),
        pytest.param({"message": "   "}, 422, id="blank"),
        pytest.param({"message": "x" * 101}, 413, id="too-long"),
        pytest.param({"message": "hi", "user_id": "bob"}, 422, id="extra-field"),
        pytest.param({"message": 5}, 422, id="not-text"),
    ],
)
def test_invalid_bodies_are_refused_before_anything_happens(
    db: Engine, sqlite_url: str, body: dict[str, object], status: int
) -> None:
    """Bad bodies get the error body and no model call, conversation or memory write."""
    model = ScriptedModel([])
    with serve_with_model(api_settings(sqlite_url, max_message_chars=100), model) as url:
        response = httpx.post(url + "/v1/chat", json=body, headers=dev_auth("alice"))
        listed = httpx.get(url + "/v1/conversations", headers=dev_auth("alice")).json()
    assert response.status_code == status
    assert set(response.json()["error"]) == {"code", "message"}
    assert listed == {"conversations": []}
    model.assert_done()


def test_unauthenticated_chat_is_refused(db: Engine, sqlite_url: str) -> None:
    """No token: 401 with WWW-Authenticate, and the model is never called."""
    model = ScriptedModel([])
    with serve_with_model(api_settings(sqlite_url), model) as url:
        response = httpx.post(url + "/v1/chat", json={"message": "hi"})
    assert response.status_code == 401 and "Bearer" in response.headers["www-authenticate"]
    model.assert_done()


def test_a_truncated_answer_finishes_with_length(db: Engine, sqlite_url: str) -> None:
    """The model stops at its token limit: the turn still commits (nothing staged) and ends
    with done(length)."""
    model = ScriptedModel([Text("This answer was cut", finish_reason="length")])
    with serve_with_model(api_settings(sqlite_url), model) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "hi"})
    assert without_deltas(events) == ["start", "delta", "memory", "sources", "done"]
    assert events[-1].data == {"finish_reason": "length"}
    model.assert_done()
