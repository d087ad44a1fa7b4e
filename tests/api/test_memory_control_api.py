"""History, undo, export, save mode and proposals over HTTP on every database: the documented
shapes, newest-first paging, 409/404 answers that change nothing, and no route reaching another
user's changes, proposals or data."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from app.conversations import repository as transcripts
from app.memory.flags import write_flag
from app.memory.provenance import Provenance
from app.memory.service import MemoryService
from tests.support.apps import api_settings, app_client
from tests.support.memory_db import add
from tests.support.tokens import dev_auth

ALICE = dev_auth("alice")
BOB = dev_auth("bob")
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
TURN = Provenance("turn", str(uuid.uuid4()), str(uuid.uuid4()))


@pytest.fixture
def client(engine: Engine, db_url: str) -> Iterator[TestClient]:
    with app_client(api_settings(db_url)) as client:
        yield client


def ops(client: TestClient, *operations: dict[str, Any], who: dict[str, str] = ALICE) -> Any:
    response = client.post("/v1/memory/operations", headers=who, json={"operations": operations})
    assert response.status_code == 200, response.text
    return response.json()


def add_op(content: str, target: str = "user") -> dict[str, Any]:
    return {"target": target, "action": "add", "content": content}


def changes(client: TestClient, who: dict[str, str] = ALICE, **params: Any) -> Any:
    response = client.get("/v1/memory/history", headers=who, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def propose(engine: Engine, user: str, content: str) -> str:
    """A turn's batch under `ask`, stored as the commit point stores it."""
    result = MemoryService(engine).commit_operations(
        user, add("user", content), provenance=TURN, may_propose=True
    )
    assert result.proposal_id is not None
    return result.proposal_id


def test_history_has_the_documented_shape_and_pages_newest_first(client: TestClient) -> None:
    """Each change: id, ISO timestamp with zone, source, operations with before/after; `limit`
    and `before` page newest first and `next` is null on the last page."""
    ops(client, add_op("Prefers tea."))
    ops(
        client,
        {"target": "user", "action": "replace", "match": "tea", "content": "Prefers coffee."},
    )
    ops(client, add_op("Uses Postgres.", "memory"))
    first = changes(client, limit=2)
    assert [c["operations"] for c in first["changes"]] == [
        [{"target": "memory", "action": "add", "after": "Uses Postgres."}],
        [
            {
                "target": "user",
                "action": "replace",
                "before": "Prefers tea.",
                "after": "Prefers coffee.",
            }
        ],
    ]
    assert all(ISO.match(c["created_at"]) and c["source"] == "api" for c in first["changes"])
    assert "turn_id" not in first["changes"][0]
    assert first["next"] == first["changes"][1]["id"]
    second = changes(client, limit=2, before=first["next"])
    assert [c["operations"][0]["after"] for c in second["changes"]] == ["Prefers tea."]
    assert second["next"] is None
    assert changes(client, who=BOB) == {"changes": [], "next": None}
    foreign = client.get("/v1/memory/history", headers=BOB, params={"before": first["next"]})
    assert foreign.status_code == 422 and foreign.json()["error"]["code"] == "invalid_cursor"
    assert client.get("/v1/memory/history", headers=ALICE, params={"limit": 0}).status_code == 422


def test_undo_applies_the_inverse_and_answers_conflicts_without_writing(
    client: TestClient, engine: Engine
) -> None:
    """Undo returns the new state and is recorded as `undo`; a change edited since is 409
    stale_undo; another user's or an unknown id is 404; all while changing nothing."""
    ops(client, add_op("Prefers tea."))
    edited = ops(
        client,
        {"target": "user", "action": "replace", "match": "tea", "content": "Prefers coffee."},
    )
    assert edited["user"]["entries"] == ["Prefers coffee."]
    replace_id = changes(client)["changes"][0]["id"]
    add_id = changes(client)["changes"][1]["id"]

    for who, change_id in ((BOB, replace_id), (ALICE, str(uuid.uuid4())), (ALICE, "not-an-id")):
        response = client.post(f"/v1/memory/history/{change_id}/undo", headers=who)
        assert response.status_code == 404, response.text
    stale = client.post(f"/v1/memory/history/{add_id}/undo", headers=ALICE)
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "stale_undo"
    assert len(changes(client)["changes"]) == 2

    undone = client.post(f"/v1/memory/history/{replace_id}/undo", headers=ALICE)
    assert undone.status_code == 200, undone.text
    assert undone.json()["user"]["entries"] == ["Prefers tea."]
    newest = changes(client)["changes"][0]
    assert newest["source"] == "undo" and newest["undoes"] == replace_id
    assert client.get("/v1/memory", headers=BOB).json()["user"]["entries"] == []

    write_flag(engine, "memory", False, updated_by="test")
    off = client.post(f"/v1/memory/history/{newest['id']}/undo", headers=ALICE)
    assert off.status_code == 409 and off.json()["error"]["code"] == "memory_disabled"
    state = client.get("/v1/memory", headers=ALICE).json()
    assert state["status"] == "disabled" and state["user"]["entries"] == ["Prefers tea."]
    assert len(changes(client)["changes"]) == 3  # history stays readable while off


def test_save_mode_defaults_to_auto_and_is_per_user(client: TestClient) -> None:
    assert client.get("/v1/memory/settings", headers=ALICE).json() == {
        "save_mode": "auto",
        "recall_chats": False,
    }
    put = client.put("/v1/memory/settings", headers=ALICE, json={"save_mode": "ask"})
    assert put.status_code == 200 and put.json() == {"save_mode": "ask", "recall_chats": False}
    assert client.get("/v1/memory/settings", headers=ALICE).json() == {
        "save_mode": "ask",
        "recall_chats": False,
    }
    assert client.get("/v1/memory/settings", headers=BOB).json() == {
        "save_mode": "auto",
        "recall_chats": False,
    }
    for body in ({"save_mode": "always"}, {"save_mode": "ask", "user_id": "bob"}, {}):
        bad = client.put("/v1/memory/settings", headers=ALICE, json=body)
        assert bad.status_code == 422, body
    assert client.get("/v1/memory/settings", headers=BOB).json() == {
        "save_mode": "auto",
        "recall_chats": False,
    }


def test_proposals_are_listed_accepted_and_rejected_by_their_owner_only(
    client: TestClient, engine: Engine
) -> None:
    """The owner sees each proposal with its turn and operations; bob cannot list, accept or
    reject it (404, nothing changes); accept applies it and records a `proposal` change;
    reject deletes; accepting while the flag is off is 409 memory_disabled."""
    client.put("/v1/memory/settings", headers=ALICE, json={"save_mode": "ask"})
    first, second = (
        propose(engine, "alice", "Prefers tea."),
        propose(engine, "alice", "Likes jazz."),
    )
    listed = client.get("/v1/memory/proposals", headers=ALICE).json()["proposals"]
    assert [p["id"] for p in listed] == [second, first]
    assert listed[0]["turn_id"] == TURN.turn_id
    assert listed[0]["conversation_id"] == TURN.conversation_id
    assert listed[0]["operations"] == [add_op("Likes jazz.")]
    assert ISO.match(listed[0]["created_at"])
    assert client.get("/v1/memory/proposals", headers=BOB).json() == {"proposals": []}
    for action in ("accept", "reject"):
        assert client.post(f"/v1/memory/proposals/{first}/{action}", headers=BOB).status_code == 404
    assert len(client.get("/v1/memory/proposals", headers=ALICE).json()["proposals"]) == 2

    accepted = client.post(f"/v1/memory/proposals/{first}/accept", headers=ALICE)
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["user"]["entries"] == ["Prefers tea."]
    newest = changes(client)["changes"][0]
    assert newest["source"] == "proposal" and newest["turn_id"] == TURN.turn_id
    again = client.post(f"/v1/memory/proposals/{first}/accept", headers=ALICE)
    assert again.status_code == 404

    write_flag(engine, "memory", False, updated_by="test")
    off = client.post(f"/v1/memory/proposals/{second}/accept", headers=ALICE)
    assert off.status_code == 409 and off.json()["error"]["code"] == "memory_disabled"
    assert client.post(f"/v1/memory/proposals/{second}/reject", headers=ALICE).status_code == 204
    assert client.get("/v1/memory/proposals", headers=ALICE).json() == {"proposals": []}
    assert client.get("/v1/memory", headers=ALICE).json()["user"]["entries"] == ["Prefers tea."]


def test_accepting_a_proposal_that_breaks_a_rule_is_422_and_keeps_it(
    client: TestClient, engine: Engine
) -> None:
    """Memory filled by the user's own edits since: the proposal no longer fits (422
    capacity_exceeded), nothing is written and it stays pending."""
    client.put("/v1/memory/settings", headers=ALICE, json={"save_mode": "ask"})
    proposal = propose(engine, "alice", "A" * 700)
    ops(client, add_op("B" * 700))
    refused = client.post(f"/v1/memory/proposals/{proposal}/accept", headers=ALICE)
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "capacity_exceeded"
    assert [
        p["id"] for p in client.get("/v1/memory/proposals", headers=ALICE).json()["proposals"]
    ] == [proposal]
    assert client.get("/v1/memory", headers=ALICE).json()["user"]["entries"] == ["B" * 700]


def test_export_is_a_download_of_everything_kept_about_the_caller_only(
    client: TestClient, engine: Engine
) -> None:
    """One attachment with memory, settings, history, proposals and conversations with their
    messages; bob's export holds none of alice's data."""
    ops(client, add_op("Prefers tea."))
    conversation = str(uuid.uuid4())
    with engine.begin() as connection:
        transcripts.create(connection, conversation, "alice", "Tea talk")
        transcripts.add_message(
            connection, conversation, TURN.turn_id or "", "user", "I like tea.", "complete"
        )
    client.put("/v1/memory/settings", headers=ALICE, json={"save_mode": "ask"})
    propose(engine, "alice", "Likes jazz.")
    response = client.get("/v1/memory/export", headers=ALICE)
    assert response.status_code == 200
    assert response.headers["content-disposition"].startswith("attachment;")
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) >= {"exported_at", "subject", "memory", "history", "conversations"}
    assert ISO.match(body["exported_at"]) and body["subject"] == "alice"
    assert body["memory"]["user"]["entries"] == ["Prefers tea."]
    assert body["settings"] == {"save_mode": "ask", "recall_chats": None}
    assert [c["operations"][0]["after"] for c in body["history"]] == ["Prefers tea."]
    assert [p["operations"][0]["content"] for p in body["proposals"]] == ["Likes jazz."]
    [exported] = body["conversations"]
    assert (exported["id"], exported["title"]) == (conversation, "Tea talk")
    assert [m["content"] for m in exported["messages"]] == ["I like tea."]

    other = client.get("/v1/memory/export", headers=BOB).json()
    assert other["subject"] == "bob"
    assert (other["history"], other["proposals"], other["conversations"]) == ([], [], [])
    assert other["memory"]["user"]["entries"] == []


def test_forget_deletes_history_and_proposals_and_keeps_the_save_mode(
    client: TestClient, engine: Engine
) -> None:
    """DELETE /v1/memory: memory, history and pending proposals are gone (also while the flag
    is off); the save mode stays; bob's history is untouched."""
    ops(client, add_op("Prefers tea."))
    ops(client, add_op("Bob's fact."), who=BOB)
    client.put("/v1/memory/settings", headers=ALICE, json={"save_mode": "ask"})
    propose(engine, "alice", "Likes jazz.")
    write_flag(engine, "memory", False, updated_by="test")
    assert client.delete("/v1/memory", headers=ALICE).status_code == 204
    assert changes(client) == {"changes": [], "next": None}
    assert client.get("/v1/memory/proposals", headers=ALICE).json() == {"proposals": []}
    assert client.get("/v1/memory/settings", headers=ALICE).json() == {
        "save_mode": "ask",
        "recall_chats": False,
    }
    assert len(changes(client, who=BOB)["changes"]) == 1


def test_control_routes_need_a_token(client: TestClient) -> None:
    for method, path in (
        ("GET", "/v1/memory/history"),
        ("POST", f"/v1/memory/history/{uuid.uuid4()}/undo"),
        ("GET", "/v1/memory/export"),
        ("GET", "/v1/memory/settings"),
        ("GET", "/v1/memory/proposals"),
        ("POST", f"/v1/memory/proposals/{uuid.uuid4()}/accept"),
    ):
        response = client.request(method, path)
        assert response.status_code == 401, path
