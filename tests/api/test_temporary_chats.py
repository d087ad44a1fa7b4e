"""Temporary chats on SQLite, PostgreSQL and MariaDB: a conversation started with
`"temporary": true` never reaches memory (the model's request holds no memory block and no
memory or search tool, on every one of its turns), is never listed, searched (route and tool)
or exported, is still readable by its owner by id, and leaves no row anywhere once the purge is
past TEMPORARY_CHAT_HOURS, while a regular conversation of the same age stays."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, update

from app.conversations.service import ConversationService
from app.db import erasure_audit as audit
from app.db.schema import conversation_messages, conversations
from app.erasure.retention import RetentionPolicy, purge
from app.memory.service import MemoryService
from tests.support.apps import api_settings
from tests.support.erasure import fulltext_optimizable, scan, sentinel
from tests.support.memory_db import add
from tests.support.scripted import ScriptedModel, Text, ToolCall, ToolCalls, serve_with_model
from tests.support.sse import Event, post_chat
from tests.support.tokens import dev_auth

# On MariaDB the scan reads server-wide variables (tests/support/erasure.py).
pytestmark = pytest.mark.own_mariadb  # the erasure scan sets MariaDB globals: on its own server

SEARCH, MEMORY_TOOL = "conversation_search", "memory_update"


def turn(url: str, user: str, body: dict[str, Any]) -> list[Event]:
    response, events = post_chat(url, dev_auth(user), body)
    assert response.status_code == 200, response.text
    assert events[-1].event == "done", events[-1]
    return events


def search_call(query: str) -> ToolCalls:
    return ToolCalls((ToolCall(SEARCH, json.dumps({"query": query}), "call_1"),))


def test_a_temporary_chat_never_reaches_memory(engine: Engine, db_url: str) -> None:
    """Every turn of a temporary chat (its first, asked with the flag, and a later one that only
    names the conversation) starts with memory `disabled`, and the model's request holds no
    memory block, no stored fact and no tool; a regular turn of the same person right after
    sees the fact and both tools (so the test can tell them apart)."""
    fact = sentinel("fact")
    MemoryService(engine).commit_operations("alice", add("user", f"Lives near {fact}"))
    model = ScriptedModel([Text("Sure."), Text("Again."), Text("Regular.")])
    with serve_with_model(api_settings(db_url), model) as url:
        first = turn(url, "alice", {"message": "hello there", "temporary": True})
        conversation_id = first[0].data["conversation_id"]
        later = turn(url, "alice", {"message": "more", "conversation_id": conversation_id})
        regular = turn(url, "alice", {"message": "hello again"})
    for events in (first, later):
        assert events[0].data["memory"] == {"status": "disabled"}
        assert [e.data["outcome"] for e in events if e.event == "memory"] in ([], ["none"])
    assert regular[0].data["memory"] == {"status": "available"}
    temporary_requests, regular_request = model.requests[:2], model.requests[2]
    for request in temporary_requests:
        assert request.tools == ()
        assert fact not in json.dumps(request.messages)
        assert "persistent_memory_data" not in request.system_text()
    assert fact in regular_request.system_text()
    assert {MEMORY_TOOL, SEARCH} <= regular_request.tool_names
    model.assert_done()


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"conversation_id": "EXISTING"}, id="existing-conversation"),
        pytest.param({"project_id": "00000000-0000-4000-8000-000000000000"}, id="in-a-project"),
        pytest.param({"temporary": "yes"}, id="not-a-boolean"),
    ],
)
def test_temporary_is_for_new_general_chats_only(
    engine: Engine, db_url: str, body: dict[str, Any]
) -> None:
    """`temporary` with an existing conversation, with a project, or not a boolean is a clear
    422 and nothing is stored or asked of the model."""
    model = ScriptedModel([Text("First.")])
    with serve_with_model(api_settings(db_url), model) as url:
        existing = turn(url, "alice", {"message": "a regular chat"})[0].data["conversation_id"]
        wanted = {"message": "secret plan", "temporary": True, **body}
        if wanted.get("conversation_id") == "EXISTING":
            wanted["conversation_id"] = existing
        response, events = post_chat(url, dev_auth("alice"), wanted)
        listed = httpx.get(f"{url}/v1/conversations", headers=dev_auth("alice")).json()
    assert response.status_code == 422 and events == []
    assert "temporary" in response.json()["error"]["message"]
    assert [c["id"] for c in listed["conversations"]] == [existing]
    with engine.connect() as connection:
        assert connection.execute(conversations.select()).all().__len__() == 1
    model.assert_done()


def test_a_temporary_chat_is_not_listed_searched_or_exported(engine: Engine, db_url: str) -> None:
    """The owner reads it by id (`temporary: true`); the list, the search route, the search tool
    and the export never show it; a regular chat with the same word is found (the searches
    work)."""
    word = sentinel("word")
    model = ScriptedModel(
        [Text(f"Temporary {word}."), Text(f"Regular {word}."), search_call(word), Text("Found.")]
    )
    with serve_with_model(api_settings(db_url), model) as url:
        secret = turn(url, "alice", {"message": f"about {word}", "temporary": True})
        temporary_id = secret[0].data["conversation_id"]
        regular_id = turn(url, "alice", {"message": f"also {word}"})[0].data["conversation_id"]
        turn(url, "alice", {"message": "what did I say before?"})
        auth = dev_auth("alice")
        shown = httpx.get(f"{url}/v1/conversations/{temporary_id}", headers=auth).json()
        other = httpx.get(f"{url}/v1/conversations/{temporary_id}", headers=dev_auth("bob"))
        regular = httpx.get(f"{url}/v1/conversations/{regular_id}", headers=auth).json()
        listed = httpx.get(f"{url}/v1/conversations", headers=auth).json()["conversations"]
        found = httpx.get(f"{url}/v1/conversations/search", params={"q": word}, headers=auth)
        export = httpx.get(f"{url}/v1/memory/export", headers=auth, timeout=30).text
    assert shown["temporary"] is True and regular["temporary"] is False
    assert [m["content"] for m in shown["messages"]] == [f"about {word}", f"Temporary {word}."]
    assert other.status_code == 404
    assert temporary_id not in {c["id"] for c in listed} and regular_id in {c["id"] for c in listed}
    assert {r["conversation_id"] for r in found.json()["results"]} == {regular_id}
    tool_result = model.requests[3].messages[-1]["content"]
    assert f"Temporary {word}" not in tool_result and f"about {word}" not in tool_result
    assert f"Regular {word}" in tool_result
    assert temporary_id not in export and "Temporary " + word not in export
    assert regular_id in export
    model.assert_done()


def test_the_purge_deletes_temporary_chats_after_their_hours_only(
    engine: Engine, db_url: str
) -> None:
    """Past TEMPORARY_CHAT_HOURS a temporary chat is gone with its messages: no table holds
    its id, its title or its words (search storage included); a younger temporary chat and a
    regular chat as old as the expired one stay; a second purge removes nothing."""
    words = {name: sentinel(name) for name in ("old", "young", "regular")}
    model = ScriptedModel([Text(f"Noted {w}.") for w in words.values()])
    with serve_with_model(api_settings(db_url), model) as url:
        ids = {
            name: turn(url, "alice", {"message": f"say {w}", "temporary": name != "regular"})[
                0
            ].data["conversation_id"]
            for name, w in words.items()
        }
    now = audit.now()
    with engine.begin() as connection:  # planting the past: two of them began 25 hours ago
        for name in ("old", "regular"):
            stamp = now - timedelta(hours=25)
            connection.execute(
                update(conversations)
                .where(conversations.c.id == ids[name])
                .values(created_at=stamp, updated_at=stamp)
            )
            connection.execute(
                update(conversation_messages)
                .where(conversation_messages.c.conversation_id == ids[name])
                .values(created_at=stamp)
            )
    policy = RetentionPolicy(temporary_hours=24)
    services = (MemoryService(engine), ConversationService(engine))
    with fulltext_optimizable(engine):
        report = purge(engine, *services, policy, at=now)
        again = purge(engine, *services, policy, at=now)
        found = scan(engine, {**words, "old_id": ids["old"]})
    assert (report.temporary_chats, again.temporary_chats) == (1, 0)
    assert not [hit for hit in found if hit.endswith((":old", ":old_id"))], found
    assert any(hit.endswith(":young") for hit in found)
    assert any(hit.endswith(":regular") for hit in found)
    with engine.connect() as connection:
        left = {row.id for row in connection.execute(conversations.select())}
    assert left == {ids["young"], ids["regular"]}
