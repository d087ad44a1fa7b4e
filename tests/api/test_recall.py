"""Recall of earlier chats over real HTTP/SSE on SQLite, PostgreSQL and MariaDB, read from the
system prompt the scripted model received: off by default (no recall block, no recalled
source); once the person turns it on, a turn's prompt holds a nonce-tagged block of the
person's earlier messages that match, from the same project scope only, never another
person's, never the current conversation's, and exactly those snippets are the turn's recalled
sources. RECALL_CHATS_DEFAULT makes it on for people who never chose; a person's choice wins.
A failing recall leaves the turn answering (tests/unit/test_recall.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
from sqlalchemy import Engine

from app.offline.wire import ChatRequest
from app.settings import Settings
from tests.support.apps import api_settings
from tests.support.scripted import ScriptedModel, Text, serve_with_model
from tests.support.sse import Event, first, post_chat
from tests.support.tokens import dev_auth

_RECALL = re.compile(r"<past_conversations_([0-9a-f]{32})>\n(.*?)\n</past_conversations_\1>", re.S)
WORDS = "zorblax tuna"


def recalled_in(request: ChatRequest) -> list[tuple[str, str]]:
    """(title, snippet) of each line of the recall block the model received ([]: none)."""
    prompt = str(request.messages[0]["content"])
    block = _RECALL.search(prompt)
    if block is None:
        assert "past_conversations_" not in prompt
        return []
    decoder, lines = json.JSONDecoder(), []
    for line in block.group(2).splitlines():
        assert line.startswith("from ")
        title, end = decoder.raw_decode(line, len("from "))
        assert line[end : end + 2] == ": "
        snippet, rest = decoder.raw_decode(line, end + 2)
        assert rest == len(line)
        lines.append((title, snippet))
    return lines


def settings_for(db_url: str, **overrides: Any) -> Settings:
    """A loaded test machine can take seconds to search: recall's and the tool's deadline (their
    fail-open is tests/unit/test_recall.py's) is the tests' read deadline here."""
    return api_settings(db_url, **overrides)


def chat(url: str, user: str, body: dict[str, Any]) -> list[Event]:
    response, events = post_chat(url, dev_auth(user), body)
    assert response.status_code == 200
    return events


def settings(url: str, user: str, body: dict[str, Any] | None = None) -> httpx.Response:
    if body is None:
        return httpx.get(f"{url}/v1/memory/settings", headers=dev_auth(user), timeout=30)
    return httpx.put(f"{url}/v1/memory/settings", json=body, headers=dev_auth(user), timeout=30)


def recalled_sources(events: list[Event]) -> list[dict[str, Any]]:
    return [c for c in first(events, "sources").data["conversations"] if c["via"] == "recall"]


def test_recall_is_off_by_default_then_stays_in_scope(engine: Engine, db_url: str) -> None:
    """Off: nothing recalled. On: the person's matching earlier message from outside projects,
    not bob's, not the project's, not the current conversation's; in the project, only the
    project's. The sources list exactly the recalled snippets, with their message ids."""
    model = ScriptedModel([Text(f"Reply {n}.") for n in range(7)])
    with serve_with_model(settings_for(db_url), model) as url:
        default = settings(url, "alice").json()
        earlier = chat(url, "alice", {"message": f"my cat {WORDS} every day"})
        earlier_id = first(earlier, "start").data["conversation_id"]
        chat(url, "bob", {"message": f"{WORDS} is bob's secret"})
        project_id = httpx.post(
            f"{url}/v1/projects", json={"name": "Pets"}, headers=dev_auth("alice")
        ).json()["id"]
        in_project = chat(
            url, "alice", {"message": f"{WORDS} in the project", "project_id": project_id}
        )
        project_conversation = first(in_project, "start").data["conversation_id"]
        off = chat(url, "alice", {"message": WORDS})  # request 3
        off_id = first(off, "start").data["conversation_id"]
        switched = settings(url, "alice", {"recall_chats": True})
        now = chat(url, "alice", {"message": WORDS})  # request 4
        current = first(now, "start").data["conversation_id"]
        again = chat(url, "alice", {"message": WORDS, "conversation_id": current})  # 5
        scoped = chat(url, "alice", {"message": WORDS, "project_id": project_id})  # 6
        hits = httpx.get(
            f"{url}/v1/conversations/search", params={"q": WORDS}, headers=dev_auth("alice")
        ).json()["results"]
    model.assert_done()
    assert default == {"save_mode": "auto", "recall_chats": False}
    assert switched.json() == {"save_mode": "auto", "recall_chats": True}
    assert recalled_in(model.requests[3]) == [] and recalled_sources(off) == []

    message_ids = {
        (h["conversation_id"], h["snippet"].replace("«", "").replace("»", "")): h["message_id"]
        for h in hits
    }
    for events, request in ((now, model.requests[4]), (again, model.requests[5])):
        lines = recalled_in(request)
        sources = recalled_sources(events)
        assert [(s["title"], s["snippet"]) for s in sources] == lines
        # Both earlier conversations outside projects; never the current one.
        assert {s["conversation_id"] for s in sources} == {earlier_id, off_id}
        assert all("bob" not in snippet for _title, snippet in lines)
        for source in sources:
            assert (
                message_ids[(source["conversation_id"], source["snippet"])] == source["message_id"]
            )
    project_sources = recalled_sources(scoped)
    assert {s["conversation_id"] for s in project_sources} == {project_conversation}
    assert [(s["title"], s["snippet"]) for s in project_sources] == recalled_in(model.requests[6])


def test_the_operator_default_and_the_persons_choice(engine: Engine, db_url: str) -> None:
    """RECALL_CHATS_DEFAULT=true: recall is on for a person who never chose; turning it off is
    kept; the save mode and recall are set independently; a non-boolean is 422."""
    model = ScriptedModel([Text("First."), Text("On."), Text("Off.")])
    with serve_with_model(settings_for(db_url, recall_chats_default=True), model) as url:
        chat(url, "alice", {"message": f"{WORDS} first"})
        on = chat(url, "alice", {"message": WORDS})
        read = settings(url, "alice").json()
        ask = settings(url, "alice", {"save_mode": "ask"}).json()
        off = settings(url, "alice", {"recall_chats": False}).json()
        after = chat(url, "alice", {"message": WORDS})
        bad = settings(url, "alice", {"recall_chats": "yes"})
        unknown = settings(url, "alice", {"recall": True})
        kept = settings(url, "alice").json()
    assert read == {"save_mode": "auto", "recall_chats": True}
    assert ask == {"save_mode": "ask", "recall_chats": True}
    assert off == {"save_mode": "ask", "recall_chats": False}
    assert len(recalled_sources(on)) == 1 and recalled_in(model.requests[1]) != []
    assert recalled_sources(after) == [] and recalled_in(model.requests[2]) == []
    assert bad.status_code == 422 and unknown.status_code == 422
    assert kept == {"save_mode": "ask", "recall_chats": False}


def test_recall_is_bounded_in_characters(engine: Engine, db_url: str) -> None:
    """The block holds only the snippets whose lines fit in RECALL_MAX_CHARS (here one of the
    two that match), and the sources list only that one."""
    model = ScriptedModel([Text(f"R{n}.") for n in range(3)])
    bounded = settings_for(db_url, recall_chats_default=True, recall_max_chars=250)
    with serve_with_model(bounded, model) as url:
        for n in range(2):
            chat(url, "alice", {"message": f"{WORDS} number {n} " + "x" * 100})
        events = chat(url, "alice", {"message": WORDS})
    block = _RECALL.search(str(model.requests[2].messages[0]["content"]))
    assert block is not None and len(block.group(2)) <= 250
    lines = recalled_in(model.requests[2])
    assert len(lines) == 1
    assert [(s["title"], s["snippet"]) for s in recalled_sources(events)] == lines
