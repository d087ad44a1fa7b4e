"""Conversation transcripts: owned per user, kept apart from memory, sent back as history."""

from __future__ import annotations

import httpx
from sqlalchemy import Engine

from tests.support.apps import api_settings, closed_port_url
from tests.support.scripted import ScriptedModel, Text, serve_with_model
from tests.support.sse import names, post_chat
from tests.support.tokens import dev_auth


def test_history_is_sent_on_the_next_turn_and_bounded(engine: Engine, db_url: str) -> None:
    """The next turn of a conversation sends its earlier messages (at most HISTORY_MESSAGES)."""
    model = ScriptedModel([Text("First answer."), Text("Second answer."), Text("Third.")])
    with serve_with_model(api_settings(db_url, history_messages=2), model) as url:
        _, one = post_chat(url, dev_auth("alice"), {"message": "first question"})
        conversation_id = one[0].data["conversation_id"]
        _, two = post_chat(
            url,
            dev_auth("alice"),
            {"message": "second question", "conversation_id": conversation_id},
        )
        post_chat(
            url,
            dev_auth("alice"),
            {"message": "third question", "conversation_id": conversation_id},
        )
        body = httpx.get(
            f"{url}/v1/conversations/{conversation_id}", headers=dev_auth("alice")
        ).json()
    assert two[0].data["conversation_id"] == conversation_id
    second = [(m["role"], m["content"]) for m in model.requests[1].messages[1:]]
    assert second == [
        ("user", "first question"),
        ("assistant", "First answer."),
        ("user", "second question"),
    ]
    third = [(m["role"], m["content"]) for m in model.requests[2].messages[1:]]
    assert third == [
        ("user", "second question"),
        ("assistant", "Second answer."),
        ("user", "third question"),
    ]
    assert [(m["role"], m["status"]) for m in body["messages"]] == [
        ("user", "complete"),
        ("assistant", "complete"),
    ] * 3
    assert {m["turn_id"] for m in body["messages"][:2]} == {one[0].data["turn_id"]}
    assert body["title"] == "First question"  # titled from the first message
    model.assert_done()


def test_another_users_conversation_is_a_404(engine: Engine, db_url: str) -> None:
    """Reading, deleting or continuing someone else's conversation answers 404, never 403, and
    the model is not called for the refused turn."""
    model = ScriptedModel([Text("Private answer.")])
    with serve_with_model(api_settings(db_url), model) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "my secret plan"})
        conversation_id = events[0].data["conversation_id"]
        as_bob = dev_auth("bob")
        read = httpx.get(f"{url}/v1/conversations/{conversation_id}", headers=as_bob)
        delete = httpx.delete(f"{url}/v1/conversations/{conversation_id}", headers=as_bob)
        turn, _ = post_chat(url, as_bob, {"message": "hi", "conversation_id": conversation_id})
        listed = httpx.get(f"{url}/v1/conversations", headers=as_bob).json()
        still = httpx.get(f"{url}/v1/conversations/{conversation_id}", headers=dev_auth("alice"))
    assert (read.status_code, delete.status_code, turn.status_code) == (404, 404, 404)
    assert listed == {"conversations": []}
    assert still.status_code == 200
    model.assert_done()


def test_list_newest_first_and_delete(engine: Engine, db_url: str) -> None:
    """The caller's conversations, newest first; DELETE removes one (204) and then it is 404."""
    model = ScriptedModel([Text("a"), Text("b")])
    with serve_with_model(api_settings(db_url), model) as url:
        _, first = post_chat(url, dev_auth("alice"), {"message": "older"})
        _, second = post_chat(url, dev_auth("alice"), {"message": "newer"})
        listed = httpx.get(f"{url}/v1/conversations", headers=dev_auth("alice")).json()
        ids = [first[0].data["conversation_id"], second[0].data["conversation_id"]]
        deleted = httpx.delete(f"{url}/v1/conversations/{ids[0]}", headers=dev_auth("alice"))
        gone = httpx.get(f"{url}/v1/conversations/{ids[0]}", headers=dev_auth("alice"))
        after = httpx.get(f"{url}/v1/conversations", headers=dev_auth("alice")).json()
    assert [c["id"] for c in listed["conversations"]] == ids[::-1]
    assert set(listed["conversations"][0]) == {
        "id",
        "title",
        "created_at",
        "updated_at",
        "project_id",
        "pinned",
        "archived",
    }
    assert listed["conversations"][0]["project_id"] is None
    assert (deleted.status_code, gone.status_code) == (204, 404)
    assert [c["id"] for c in after["conversations"]] == ids[1:]
    model.assert_done()


def test_with_the_database_down_a_new_turn_still_answers() -> None:
    """No database: the turn answers with memory unavailable and no stored conversation."""
    model = ScriptedModel([Text("Still here.")])
    settings = api_settings(closed_port_url(), memory_enabled=True)
    with serve_with_model(settings, model) as url:
        response, events = post_chat(url, dev_auth("alice"), {"message": "hello"})
    assert response.status_code == 200
    assert names(events)[0] == "start" and names(events)[-1] == "done"
    assert events[0].data["memory"] == {"status": "unavailable"}
    assert events[0].data["conversation_id"] is None
    # Invariant: a turn whose message cannot be stored says so in `start`, before the answer.
    assert events[0].data["transcript"] == {"status": "unavailable"}
    model.assert_done()
