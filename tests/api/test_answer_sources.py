"""Sources of an answer over real HTTP/SSE on SQLite, PostgreSQL and MariaDB, read against the
request the scripted model actually received: `memory` is exactly the entries of the prompt's
memory block (a withheld entry is not one), `conversations` exactly the snippets of the search
tool's answer (each naming its message by the `id` the conversation's GET gives it), `changes`
what the turn committed or proposed, `memory_update` what became of the staged edits. The
`sources` event comes right before `done`; the stored answer carries the same object (a reload
shows it) and so does the export; deleting the conversation or erasing the person leaves no row
that holds them. "Wrong" is the person's own removal through POST /v1/memory/operations with
`source: "sources"`: history says so, and undo restores the entry."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
from sqlalchemy import Engine, func, select

from app.db.schema import conversation_messages
from app.offline.wire import ChatRequest
from app.settings import Settings
from tests.support.apps import api_settings
from tests.support.scripted import (
    ScriptedModel,
    Text,
    ToolCall,
    ToolCalls,
    memory_call,
    serve_with_model,
)
from tests.support.sse import Event, first, post_chat, without_deltas
from tests.support.tokens import dev_auth

ENTRY_USER = "The user keeps bees named Quillbert."
ENTRY_MEMORY = "Deploys go through the saffron pipeline."
NEW_ENTRY = "The user's favourite colour is teal."
_BLOCK = re.compile(
    r"<persistent_memory_data_([0-9a-f]{32})>\n(.*?)\n</persistent_memory_data_\1>", re.S
)
HEADING_TARGETS = {"USER PROFILE": "user", "AGENT MEMORY": "memory", "PROJECT MEMORY": "project"}


def prompt_entries(request: ChatRequest) -> list[dict[str, str]]:
    """The entries of the memory block in the system prompt the model received, in order."""
    block = _BLOCK.search(str(request.messages[0]["content"]))
    assert block is not None
    entries, target = [], ""
    for line in block.group(2).splitlines():
        heading = line.split(" [")[0]
        if heading in HEADING_TARGETS:
            target = HEADING_TARGETS[heading]
        elif line.startswith('"'):
            entries.append({"target": target, "text": json.loads(line)})
    return entries


def settings_for(db_url: str, **overrides: Any) -> Settings:
    """A loaded test machine can take seconds to search: recall's and the tool's deadline (their
    fail-open is tests/unit/test_recall.py's) is the tests' read deadline here."""
    return api_settings(db_url, **overrides)


def chat(url: str, user: str, body: dict[str, Any]) -> list[Event]:
    response, events = post_chat(url, dev_auth(user), body)
    assert response.status_code == 200
    return events


def operations(url: str, user: str, *ops: dict[str, Any], **extra: Any) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/memory/operations",
        json={"operations": list(ops), **extra},
        headers=dev_auth(user),
        timeout=30,
    )


def get(url: str, path: str, user: str = "alice") -> httpx.Response:
    return httpx.get(f"{url}{path}", headers=dev_auth(user), timeout=30)


def stored_with_sources(engine: Engine) -> int:
    with engine.connect() as connection:
        query = select(func.count()).where(conversation_messages.c.sources.is_not(None))
        return int(connection.execute(query).scalar_one())


def test_sources_are_what_the_model_was_given_and_survive_a_reload(
    engine: Engine, db_url: str
) -> None:
    """The memory entries of the prompt's block, the snippets of the search tool's answer (by
    conversation and message id) and the committed change: in the `sources` event right before
    `done`, on the stored answer (GET) and in the export; gone with the conversation."""
    search = ToolCalls(
        (ToolCall("conversation_search", json.dumps({"query": "zebra stripes"}), "call_s"),)
    )
    model = ScriptedModel(
        [
            Text("Zebras keep cool."),
            search,
            memory_call({"target": "user", "action": "add", "content": NEW_ENTRY}),
            Text("From before: zebras keep cool."),
        ]
    )
    with serve_with_model(settings_for(db_url), model) as url:
        seeded = operations(
            url,
            "alice",
            {"target": "user", "action": "add", "content": ENTRY_USER},
            {"target": "memory", "action": "add", "content": ENTRY_MEMORY},
        )
        earlier = chat(url, "alice", {"message": "why do zebra have stripes"})
        earlier_id = first(earlier, "start").data["conversation_id"]
        events = chat(url, "alice", {"message": "remind me about the animals"})
        conversation_id = first(events, "start").data["conversation_id"]
        found = httpx.get(
            f"{url}/v1/conversations/search",
            params={"q": "zebra stripes"},
            headers=dev_auth("alice"),
        ).json()["results"]
        reloaded = get(url, f"/v1/conversations/{conversation_id}").json()
        cited = get(url, f"/v1/conversations/{earlier_id}").json()["messages"]
        exported = get(url, "/v1/memory/export").json()
        deleted = httpx.delete(
            f"{url}/v1/conversations/{conversation_id}", headers=dev_auth("alice")
        )
        left = stored_with_sources(engine)
    model.assert_done()
    assert seeded.status_code == 200 and deleted.status_code == 204
    assert without_deltas(events)[-3:] == ["memory", "sources", "done"]
    sources = first(events, "sources").data
    turn_request, tool_request = model.requests[1], model.requests[2]
    assert sources["memory"] == prompt_entries(turn_request)
    assert {"target": "user", "text": ENTRY_USER} in sources["memory"]
    assert {"target": "memory", "text": ENTRY_MEMORY} in sources["memory"]
    tool_answer = json.loads(tool_request.messages[-1]["content"])
    given = [(r["conversation"], r["snippet"]) for r in tool_answer["results"]]
    assert [(c["title"], c["snippet"]) for c in sources["conversations"]] == given
    assert {c["conversation_id"] for c in sources["conversations"]} == {earlier_id}
    ids = {r["message_id"] for r in found}
    assert {c["message_id"] for c in sources["conversations"]} <= ids
    assert all(c["via"] == "search" for c in sources["conversations"])
    # Each snippet's message_id is the `id` of that message in its conversation (the web client
    # opens the conversation there), and ids are distinct.
    by_id = {message["id"]: message for message in cited}
    assert len(by_id) == len(cited) and all(isinstance(key, int) for key in by_id)
    for source in sources["conversations"]:
        words = re.findall(r"\w+", source["snippet"].replace("…", " "))
        assert all(word in by_id[source["message_id"]]["content"] for word in words), source
    assert sources["changes"] == [
        {"target": "user", "action": "add", "text": NEW_ENTRY, "outcome": "committed"}
    ]
    assert sources["memory_update"] == {"outcome": "committed", "reason": None}
    answer = reloaded["messages"][-1]
    assert answer["role"] == "assistant" and answer["sources"] == sources
    assert "sources" not in reloaded["messages"][-2]  # the person's message has none
    exported_answers = [
        message
        for conversation in exported["conversations"]
        if conversation["id"] == conversation_id
        for message in conversation["messages"]
        if message["role"] == "assistant"
    ]
    assert [message["sources"] for message in exported_answers] == [sources]
    # The earlier conversation's answer had its own sources; the deleted one's are gone.
    assert left == 1


def test_project_documents_in_the_sources(engine: Engine, db_url: str) -> None:
    """In a project the sources list the user profile and the project's document, each
    `project` entry with its project id; the general document (not in the project's scope)
    is not listed because the model never saw it."""
    model = ScriptedModel([Text("Fine.")])
    with serve_with_model(settings_for(db_url), model) as url:
        project = httpx.post(
            f"{url}/v1/projects", json={"name": "Hive"}, headers=dev_auth("alice")
        ).json()
        project_id = project["id"]
        operations(url, "alice", {"target": "user", "action": "add", "content": ENTRY_USER})
        operations(url, "alice", {"target": "memory", "action": "add", "content": ENTRY_MEMORY})
        in_project = httpx.post(
            f"{url}/v1/memory/operations",
            params={"project_id": project_id},
            json={"operations": [{"target": "project", "action": "add", "content": "Hive X."}]},
            headers=dev_auth("alice"),
        )
        events = chat(url, "alice", {"message": "hello", "project_id": project_id})
    assert in_project.status_code == 200
    sources = first(events, "sources").data
    seen = prompt_entries(model.requests[0])
    assert [{"target": m["target"], "text": m["text"]} for m in sources["memory"]] == seen
    assert {"target": "project", "text": "Hive X.", "project_id": project_id} in sources["memory"]
    assert all(m["text"] != ENTRY_MEMORY for m in sources["memory"])


def test_a_proposed_change_is_listed_as_proposed(engine: Engine, db_url: str) -> None:
    """Under "Ask before saving" the turn's batch is a proposal: its change is `proposed`."""
    model = ScriptedModel(
        [memory_call({"target": "user", "action": "add", "content": NEW_ENTRY}), Text("Asked.")]
    )
    with serve_with_model(settings_for(db_url), model) as url:
        httpx.put(f"{url}/v1/memory/settings", json={"save_mode": "ask"}, headers=dev_auth("alice"))
        events = chat(url, "alice", {"message": "remember teal"})
    assert first(events, "memory").data["outcome"] == "proposed"
    assert first(events, "sources").data["changes"] == [
        {"target": "user", "action": "add", "text": NEW_ENTRY, "outcome": "proposed"}
    ]
    assert first(events, "sources").data["memory_update"] == {"outcome": "proposed", "reason": None}


def test_what_became_of_staged_edits_is_kept_with_the_answer(engine: Engine, db_url: str) -> None:
    """`memory_update` is the memory event's outcome when the memory tool staged edits, on the
    event and the stored answer: `none` for a fact already remembered (no change is listed), and
    absent from a turn that staged nothing (a reload labels the answer's chip from it)."""
    add = {"target": "user", "action": "add", "content": ENTRY_USER}
    model = ScriptedModel([memory_call(add), Text("Known."), Text("Plain.")])
    with serve_with_model(settings_for(db_url), model) as url:
        operations(url, "alice", add)
        events = chat(url, "alice", {"message": "remember the bees"})
        conversation_id = first(events, "start").data["conversation_id"]
        plain = chat(url, "alice", {"message": "hello", "conversation_id": conversation_id})
        stored = get(url, f"/v1/conversations/{conversation_id}").json()["messages"]
    assert first(events, "memory").data["outcome"] == "none"
    sources = first(events, "sources").data
    assert sources["changes"] == []
    assert sources["memory_update"] == {"outcome": "none", "reason": None}
    assert "memory_update" not in first(plain, "sources").data
    assert [m["sources"] for m in stored if m["role"] == "assistant"] == [
        sources,
        first(plain, "sources").data,
    ]


def test_erasure_removes_every_answers_sources(engine: Engine, db_url: str) -> None:
    """After DELETE /v1/account no message row, and so no sources, remains for the person."""
    model = ScriptedModel([Text("One."), Text("Two.")])
    with serve_with_model(settings_for(db_url), model) as url:
        operations(url, "alice", {"target": "user", "action": "add", "content": ENTRY_USER})
        chat(url, "alice", {"message": "first"})
        chat(url, "alice", {"message": "second"})
        before = stored_with_sources(engine)
        erased = httpx.request(
            "DELETE", f"{url}/v1/account", json={"confirm": "alice"}, headers=dev_auth("alice")
        )
        after = stored_with_sources(engine)
    assert before == 2 and erased.status_code == 204 and after == 0


def test_forgetting_memory_forgets_the_copies_in_sources(engine: Engine, db_url: str) -> None:
    """DELETE /v1/memory also drops the sources stored with the person's answers (they hold
    copies of entries); the answers stay; bob's are untouched."""
    model = ScriptedModel([Text("Alice's."), Text("Bob's.")])
    with serve_with_model(settings_for(db_url), model) as url:
        operations(url, "alice", {"target": "user", "action": "add", "content": ENTRY_USER})
        operations(url, "bob", {"target": "user", "action": "add", "content": ENTRY_MEMORY})
        mine = first(chat(url, "alice", {"message": "hi"}), "start").data["conversation_id"]
        chat(url, "bob", {"message": "hi"})
        forgotten = httpx.delete(f"{url}/v1/memory", headers=dev_auth("alice"))
        reloaded = get(url, f"/v1/conversations/{mine}").json()
        left = stored_with_sources(engine)
    assert forgotten.status_code == 204
    assert [m["content"] for m in reloaded["messages"]] == ["hi", "Alice's."]
    assert reloaded["messages"][-1]["sources"] is None
    assert left == 1  # bob's


def test_wrong_removes_the_entry_as_sources_and_undo_restores_it(
    engine: Engine, db_url: str
) -> None:
    """ "Wrong" removes through the one way in with history source `sources`; undoing that
    change brings the entry back; an unknown source is 422 and changes nothing."""
    with serve_with_model(settings_for(db_url), ScriptedModel()) as url:
        operations(url, "alice", {"target": "user", "action": "add", "content": ENTRY_USER})
        refused = operations(
            url,
            "alice",
            {"target": "user", "action": "remove", "match": ENTRY_USER},
            source="turn",
        )
        kept = get(url, "/v1/memory").json()["user"]["entries"]
        wrong = operations(
            url,
            "alice",
            {"target": "user", "action": "remove", "match": ENTRY_USER},
            source="sources",
        )
        history = get(url, "/v1/memory/history").json()["changes"]
        undone = httpx.post(
            f"{url}/v1/memory/history/{history[0]['id']}/undo", headers=dev_auth("alice")
        )
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_source"
    assert kept == [ENTRY_USER]
    assert wrong.status_code == 200 and wrong.json()["user"]["entries"] == []
    assert history[0]["source"] == "sources"
    assert history[0]["operations"] == [
        {"target": "user", "action": "remove", "before": ENTRY_USER}
    ]
    assert undone.status_code == 200 and undone.json()["user"]["entries"] == [ENTRY_USER]
