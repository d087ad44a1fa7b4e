"""Projects over real HTTP on SQLite, PostgreSQL and MariaDB: the /v1/projects routes, the
memory routes' `project_id`, conversations in projects, and a scripted model trying to reach
another project by every argument it has.

Invariants: another person's project is a 404 everywhere; a project's document, history and
proposals are reached only with its id; the model reaches the project of the turn's
conversation only, whatever its arguments say, and the bytes it receives never carry another
project's document; deleting a project needs a choice for its conversations."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from app.main import create_app
from app.offline.wire import ChatRequest
from tests.support.apps import api_settings
from tests.support.gates import Gates
from tests.support.scripted import (
    HeldText,
    ScriptedModel,
    Text,
    ToolCall,
    ToolCalls,
    memory_call,
    serve_with_model,
)
from tests.support.sse import first, post_chat, text_of
from tests.support.tokens import dev_auth
from tests.support.waiting import wait_for

ALICE, MALLORY = dev_auth("alice"), dev_auth("mallory")
SECRET_A = "Client A's launch is codenamed Bluebird."
SECRET_B = "Client B pays net 60."
GENERAL_NOTE = "General note: deploys on Fridays."


def create(client: httpx.Client, name: str, **extra: Any) -> dict[str, Any]:
    response = client.post("/v1/projects", json={"name": name, **extra}, headers=ALICE)
    assert response.status_code == 201, response.text
    return dict(response.json())


def add(client: httpx.Client, target: str, content: str, project: str | None) -> httpx.Response:
    params = {"project_id": project} if project else {}
    return client.post(
        "/v1/memory/operations",
        params=params,
        json={"operations": [{"target": target, "action": "add", "content": content}]},
        headers=ALICE,
    )


@pytest.fixture
def client(engine: Engine, db_url: str) -> Any:
    model = ScriptedModel([])
    with (
        serve_with_model(api_settings(db_url, projects_max=3), model) as url,
        httpx.Client(base_url=url, timeout=30) as http,
    ):
        yield http


def test_project_routes(client: httpx.Client) -> None:
    """Create, list, rename, opt in, the limit, bad names; another person sees 404 only."""
    project = create(client, "  Client A  ")
    assert project["name"] == "Client A" and project["general_memory"] is False
    assert project["conversation_count"] == 0
    assert set(project) == {
        "id",
        "name",
        "general_memory",
        "conversation_count",
        "created_at",
        "updated_at",
    }
    listed = client.get("/v1/projects", headers=ALICE).json()["projects"]
    assert [item["id"] for item in listed] == [project["id"]]
    changed = client.patch(
        f"/v1/projects/{project['id']}",
        json={"name": "Client A2", "general_memory": True},
        headers=ALICE,
    ).json()
    assert changed["name"] == "Client A2" and changed["general_memory"] is True
    for bad in ("", "   ", "x" * 101, "tab\there", "nul\x00"):
        response = client.post("/v1/projects", json={"name": bad}, headers=ALICE)
        assert response.status_code == 422, bad
    assert client.post("/v1/projects", json={"name": "A", "x": 1}, headers=ALICE).status_code == 422
    create(client, "Two")
    create(client, "Three")
    over = client.post("/v1/projects", json={"name": "Four"}, headers=ALICE)
    assert over.status_code == 409 and over.json()["error"]["code"] == "project_limit"
    assert client.get("/v1/projects", headers=MALLORY).json() == {"projects": []}
    for method, path, body in (
        ("PATCH", f"/v1/projects/{project['id']}", {"name": "Mine"}),
        ("DELETE", f"/v1/projects/{project['id']}", None),
        ("GET", f"/v1/memory?project_id={project['id']}", None),
        ("GET", f"/v1/memory/history?project_id={project['id']}", None),
        ("GET", f"/v1/memory/proposals?project_id={project['id']}", None),
        ("GET", f"/v1/conversations?project_id={project['id']}", None),
        ("GET", "/v1/memory?project_id=not-an-id", None),
    ):
        response = client.request(method, path, json=body, headers=MALLORY)
        assert response.status_code == 404, (method, path, response.text)


def test_memory_routes_are_scoped(client: httpx.Client) -> None:
    """The project document is reached only with its id; GET shows where entries apply."""
    a, b = create(client, "A")["id"], create(client, "B")["id"]
    assert add(client, "user", "Name: Alice.", None).status_code == 200
    assert add(client, "memory", GENERAL_NOTE, None).status_code == 200
    written = add(client, "project", SECRET_A, a)
    assert written.status_code == 200, written.text
    assert written.json()["project"]["entries"] == [SECRET_A]
    refused = add(client, "project", "No project.", None)
    assert refused.status_code == 422
    state = client.get("/v1/memory", params={"project_id": a}, headers=ALICE).json()
    assert state["project"]["entries"] == [SECRET_A]
    assert state["memory"]["entries"] == [GENERAL_NOTE]
    assert state["scope"] == {"project_id": a, "general_memory": False}
    assert state["project"]["limit"] == 2200
    general = client.get("/v1/memory", headers=ALICE).json()
    assert "project" not in general and "scope" not in general
    assert SECRET_A not in json.dumps(general)
    other = client.get("/v1/memory", params={"project_id": b}, headers=ALICE).json()
    assert other["project"]["entries"] == [] and SECRET_A not in json.dumps(other)

    history_a = client.get("/v1/memory/history", params={"project_id": a}, headers=ALICE).json()
    [change] = history_a["changes"]
    assert change["project_id"] == a
    general_history = client.get("/v1/memory/history", headers=ALICE).json()["changes"]
    assert change["id"] not in {item["id"] for item in general_history}
    for scope in ({}, {"project_id": b}):
        undo = client.post(f"/v1/memory/history/{change['id']}/undo", params=scope, headers=ALICE)
        assert undo.status_code == 404
    undo = client.post(
        f"/v1/memory/history/{change['id']}/undo", params={"project_id": a}, headers=ALICE
    )
    assert undo.status_code == 200 and undo.json()["project"]["entries"] == []

    imported = client.post(
        "/v1/memory/import",
        params={"project_id": a},
        json={"text": "- Uses PostgreSQL 16 in production."},
        headers=ALICE,
    ).json()
    proposal = imported["proposal"]
    assert proposal["project_id"] == a
    assert proposal["operations"][0]["target"] == "project"
    assert client.get("/v1/memory/proposals", headers=ALICE).json()["proposals"] == []
    for scope in ({}, {"project_id": b}):
        assert (
            client.post(
                f"/v1/memory/proposals/{proposal['id']}/accept", params=scope, headers=ALICE
            ).status_code
            == 404
        )
    accepted = client.post(
        f"/v1/memory/proposals/{proposal['id']}/accept", params={"project_id": a}, headers=ALICE
    )
    assert accepted.status_code == 200
    assert accepted.json()["project"]["entries"] == ["Uses PostgreSQL 16 in production."]

    forgot = client.delete("/v1/memory", params={"project_id": a}, headers=ALICE)
    assert forgot.status_code == 204
    after = client.get("/v1/memory", params={"project_id": a}, headers=ALICE).json()
    assert after["project"]["entries"] == [] and after["memory"]["entries"] == [GENERAL_NOTE]


def test_conversations_in_projects_and_deleting_a_project(engine: Engine, db_url: str) -> None:
    """POST /v1/chat with project_id starts a conversation in the project; the list filters;
    PATCH moves; deleting asks for a choice and honours it."""
    model = ScriptedModel([Text("One."), Text("Two."), Text("Three.")])
    with (
        serve_with_model(api_settings(db_url), model) as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        project = create(client, "A")["id"]
        _, events = post_chat(url, ALICE, {"message": "kickoff notes", "project_id": project})
        in_project = first(events, "start").data["conversation_id"]
        _, events = post_chat(url, ALICE, {"message": "general chat"})
        general = first(events, "start").data["conversation_id"]
        listed = client.get("/v1/conversations", params={"project_id": project}, headers=ALICE)
        assert [item["id"] for item in listed.json()["conversations"]] == [in_project]
        everything = client.get("/v1/conversations", headers=ALICE).json()["conversations"]
        assert {item["id"]: item["project_id"] for item in everything} == {
            in_project: project,
            general: None,
        }
        found = client.get(
            "/v1/conversations/search",
            params={"q": "kickoff", "project_id": project},
            headers=ALICE,
        ).json()["results"]
        assert {hit["conversation_id"] for hit in found} == {in_project}
        assert (
            client.get(
                "/v1/conversations/search",
                params={"q": "general", "project_id": project},
                headers=ALICE,
            ).json()["results"]
            == []
        )
        # A foreign project for a new conversation, or another project for an existing one.
        response, _ = post_chat(url, MALLORY, {"message": "hi", "project_id": project})
        assert response.status_code == 404
        other = create(client, "B")["id"]
        response, _ = post_chat(
            url, ALICE, {"message": "hi", "conversation_id": in_project, "project_id": other}
        )
        assert response.status_code == 422
        moved = client.patch(
            f"/v1/conversations/{general}", json={"project_id": project}, headers=ALICE
        )
        assert moved.status_code == 200 and moved.json()["project_id"] == project
        assert (
            client.patch(
                f"/v1/conversations/{general}", json={"project_id": project}, headers=MALLORY
            ).status_code
            == 404
        )
        refused = client.delete(f"/v1/projects/{project}", headers=ALICE)
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "project_not_empty"
        assert refused.json()["error"]["conversations"] == 2
        back = client.patch(
            f"/v1/conversations/{general}", json={"project_id": None}, headers=ALICE
        )
        assert back.json()["project_id"] is None
        done = client.delete(
            f"/v1/projects/{project}", params={"conversations": "delete"}, headers=ALICE
        )
        assert done.status_code == 204
        assert client.get(f"/v1/conversations/{in_project}", headers=ALICE).status_code == 404
        assert client.get(f"/v1/conversations/{general}", headers=ALICE).status_code == 200
        _, events = post_chat(url, ALICE, {"message": "in B", "project_id": other})
        in_b = first(events, "start").data["conversation_id"]
        detached = client.delete(
            f"/v1/projects/{other}", params={"conversations": "detach"}, headers=ALICE
        )
        assert detached.status_code == 204
        kept = client.get(f"/v1/conversations/{in_b}", headers=ALICE).json()
        assert kept["project_id"] is None
    model.assert_done()


# -- through the model ---------------------------------------------------------------------


def reason(model: ScriptedModel, request: int) -> dict[str, Any]:
    return dict(json.loads(model.requests[request].messages[-1]["content"]))


def every_byte(request: ChatRequest) -> str:
    """What the service sends the model: the whole request but the model's own earlier
    messages (its tool call arguments are its own words, echoed back)."""
    sent = [message for message in request.messages if message.get("role") != "assistant"]
    return json.dumps({"messages": sent, "tools": request.tools, "model": request.model})


ATTEMPTS = [
    pytest.param(
        {"target": "project", "action": "add", "content": "x"}, {"project_id": "B"}, id="top-level"
    ),
    pytest.param(
        {"target": "project", "action": "add", "content": "x", "project_id": "B"},
        {},
        id="operation-project_id",
    ),
    pytest.param(
        {"target": "project", "action": "add", "content": "x", "scope": "B"}, {}, id="scope"
    ),
    pytest.param({"target": "memory", "action": "add", "content": "x"}, {}, id="memory"),
    pytest.param({"target": "B", "action": "add", "content": "x"}, {}, id="target-is-the-id"),
    pytest.param(
        {"target": "project", "action": "remove", "match": SECRET_B}, {}, id="remove-B-entry"
    ),
]


@pytest.mark.parametrize(("operation", "extra"), ATTEMPTS)
def test_the_model_cannot_reach_another_project(
    engine: Engine, db_url: str, operation: dict[str, Any], extra: dict[str, Any]
) -> None:
    """In project A's conversation (not opted into general memory), a memory_update naming
    project B by any argument, or the general document, is rejected with its reason and stages
    nothing; B's document and the general one are unchanged; no byte the model receives carries
    B's document or the general note."""
    with (
        serve_with_model(api_settings(db_url), ScriptedModel([])) as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        a, b = create(client, "A")["id"], create(client, "B")["id"]
        assert add(client, "project", SECRET_A, a).status_code == 200
        assert add(client, "project", SECRET_B, b).status_code == 200
        assert add(client, "memory", GENERAL_NOTE, None).status_code == 200
    spelled = {k: (b if v == "B" else v) for k, v in operation.items()}
    extra = {k: (b if v == "B" else v) for k, v in extra.items()}
    model = ScriptedModel([memory_call(spelled, **extra), Text("No.")])
    with (
        serve_with_model(api_settings(db_url), model) as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        _, events = post_chat(url, ALICE, {"message": "save to B", "project_id": a})
        assert first(events, "tool").data["outcome"] == "rejected"
        assert first(events, "memory").data["outcome"] == "none"
        assert reason(model, 1)["status"] == "rejected"
        for project, entries in ((a, [SECRET_A]), (b, [SECRET_B])):
            state = client.get("/v1/memory", params={"project_id": project}, headers=ALICE)
            assert state.json()["project"]["entries"] == entries
        assert client.get("/v1/memory", headers=ALICE).json()["memory"]["entries"] == [GENERAL_NOTE]
    for request in model.requests:
        sent = every_byte(request)
        assert SECRET_A in sent or request is not model.requests[0]
        assert SECRET_B not in sent and GENERAL_NOTE not in sent
    tool = next(t for t in model.requests[0].tools if t["function"]["name"] == "memory_update")
    target = tool["function"]["parameters"]["properties"]["operations"]["items"]["properties"]
    assert target["target"] == {"enum": ["user", "project"]}
    model.assert_done()


def test_the_model_writes_its_own_project_and_searches_it_only(engine: Engine, db_url: str) -> None:
    """A project turn's edit lands in that project's document; conversation_search in a project
    finds that project's conversations only, and outside projects none of any project's."""

    def search(query: str) -> ToolCalls:
        arguments = json.dumps({"query": query})
        return ToolCalls((ToolCall("conversation_search", arguments, "call_s"),))

    model = ScriptedModel(
        [
            Text("Noted."),  # a turn in B, to have a conversation there
            memory_call({"target": "project", "action": "add", "content": "A uses Go."}),
            Text("Saved."),
            search("walrus"),
            Text("Nothing."),
            search("walrus"),
            Text("Nothing."),
            search("walrus"),
            Text("Found it."),
        ]
    )
    with (
        serve_with_model(api_settings(db_url), model) as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        a, b = create(client, "A")["id"], create(client, "B")["id"]
        post_chat(url, ALICE, {"message": "the walrus plan", "project_id": b})
        _, events = post_chat(url, ALICE, {"message": "remember Go", "project_id": a})
        assert first(events, "memory").data["outcome"] == "committed"
        state = client.get("/v1/memory", params={"project_id": a}, headers=ALICE).json()
        assert state["project"]["entries"] == ["A uses Go."]
        assert (
            client.get("/v1/memory", params={"project_id": b}, headers=ALICE).json()["project"][
                "entries"
            ]
            == []
        )
        post_chat(url, ALICE, {"message": "find it", "project_id": a})
        post_chat(url, ALICE, {"message": "find it outside"})
        post_chat(url, ALICE, {"message": "find it in B", "project_id": b})
    in_a, outside, in_b = reason(model, 4), reason(model, 6), reason(model, 8)
    assert in_a["status"] == "none" and outside["status"] == "none"
    assert in_b["status"] == "found" and "walrus" in json.dumps(in_b)  # the control
    model.assert_done()


def test_the_offline_model_remembers_work_facts_in_the_project(engine: Engine, db_url: str) -> None:
    """The built-in offline model (what ./scripts/serve and the browser tests run) saves a work
    fact said in a project to the project's document, recalls it there, and not elsewhere."""
    with (
        serve_with_model(api_settings(db_url)) as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        project = create(client, "A")["id"]
        _, events = post_chat(
            url, ALICE, {"message": "Remember that the build uses make.", "project_id": project}
        )
        assert first(events, "memory").data["outcome"] == "committed"
        state = client.get("/v1/memory", params={"project_id": project}, headers=ALICE).json()
        assert state["project"]["entries"] == ["The build uses make."]
        assert state["memory"]["entries"] == []
        _, events = post_chat(
            url, ALICE, {"message": "What do you remember?", "project_id": project}
        )
        assert "The build uses make." in text_of(events)
        _, events = post_chat(url, ALICE, {"message": "What do you remember?"})
        assert "make" not in text_of(events)


def test_every_route_that_takes_a_project_declares_its_404(sqlite_url: str) -> None:
    """A route with `?project_id=` answers 404 for a project that is not the caller's: its
    OpenAPI declaration says so, as the contract fuzzer (tests/reliability) requires of every
    status a route can answer."""
    spec = create_app(api_settings(sqlite_url)).openapi()
    scoped = [
        (method.upper(), path)
        for path, operations in spec["paths"].items()
        for method, operation in operations.items()
        if any(parameter["name"] == "project_id" for parameter in operation.get("parameters", []))
    ]
    assert ("DELETE", "/v1/memory") in scoped and len(scoped) >= 8
    undeclared = [
        (method, path)
        for method, path in scoped
        if "404" not in spec["paths"][path][method.lower()]["responses"]
    ]
    assert undeclared == []


@pytest.mark.parametrize("conversations", ["delete", "detach"])
def test_a_project_deleted_while_a_turn_runs_gets_nothing_of_it(
    engine: Engine, db_url: str, conversations: str
) -> None:
    """A turn in a project stages a project note and a user fact, and is held before its
    commit; the person deletes the project meanwhile (whatever becomes of its conversations).
    Released, the turn writes nothing anywhere, not even the user fact, and its memory event
    says why (`failed`, `project_deleted`). The next turn commits as usual."""
    gates = Gates()
    note = {"target": "project", "action": "add", "content": "Client Z ships on Tuesdays."}
    fact = {"target": "user", "action": "add", "content": "The user is a consultant."}
    model = ScriptedModel(
        [
            memory_call(note, fact),
            HeldText("Noted.", gates, "answer"),
            memory_call(fact),
            Text("Noted again."),
        ]
    )
    events: list[Any] = []
    with (
        serve_with_model(api_settings(db_url), model) as url,
        httpx.Client(base_url=url, timeout=30) as http,
    ):
        project = create(http, "Client Z")["id"]
        body = {"message": "Remember this.", "project_id": project}
        running = threading.Thread(target=lambda: events.extend(post_chat(url, ALICE, body)[1]))
        running.start()
        wait_for(lambda: "answer" in gates.held, "the turn held before its commit")
        deleted = http.delete(
            f"/v1/projects/{project}", params={"conversations": conversations}, headers=ALICE
        )
        assert deleted.status_code == 204, deleted.text
        gates.release("answer")
        running.join(timeout=60)
        assert not running.is_alive()
        memory = first(events, "memory").data
        assert (memory["outcome"], memory["reason"]) == ("failed", "project_deleted")
        assert http.get("/v1/memory", headers=ALICE).json()["user"]["entries"] == []
        assert http.get("/v1/memory/history", headers=ALICE).json()["changes"] == []

        _, after = post_chat(url, ALICE, {"message": "Remember that instead."})
        assert first(after, "memory").data["outcome"] == "committed"
        assert http.get("/v1/memory", headers=ALICE).json()["user"]["entries"] == [fact["content"]]
    model.assert_done()
