"""Remember-until on SQLite, PostgreSQL and MariaDB, through the routes and the turn: an entry
may carry an expiry (`until` on add and replace, null clears it, a bad one is a clear 422 that
changes nothing); `GET /v1/memory` lists it under `expiring`; at its time the entry is gone from
the document, the prompt and the counts, the next write (or the purge) records it in the
history as `expired`, and undo brings it back; an entry that expires while a turn runs makes
that turn's edit of it fail as stale, with nothing written; the offline model saves a
time-bound fact with `until`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, update

from app.conversations.service import ConversationService
from app.db import erasure_audit as audit
from app.db.schema import memory_expiries
from app.db.writers import maintenance
from app.erasure.retention import RetentionPolicy, purge
from app.memory import history
from app.memory.service import MemoryService
from app.offline.wire import ChatRequest
from tests.support.apps import api_settings, app_client
from tests.support.scripted import ScriptedModel, Text, memory_call, serve_with_model
from tests.support.sse import post_chat
from tests.support.tokens import dev_auth

ALICE = dev_auth("alice")


@pytest.fixture
def client(engine: Engine, db_url: str) -> Iterator[TestClient]:
    with app_client(api_settings(db_url)) as client:
        yield client


def ops(client: TestClient, *operations: dict[str, Any]) -> Any:
    return client.post("/v1/memory/operations", headers=ALICE, json={"operations": operations})


def in_days(days: int) -> str:
    return (audit.now() + timedelta(days=days)).date().isoformat()


def expire_now(engine: Engine, user: str = "alice") -> None:
    """Planting the passage of time: every expiry of `user` is a second ago."""
    with engine.begin() as connection, maintenance(connection):
        connection.execute(
            update(memory_expiries)
            .where(memory_expiries.c.user_id == user)
            .values(expires_at=audit.now() - timedelta(seconds=1))
        )


def test_until_is_set_listed_kept_and_cleared(client: TestClient) -> None:
    """add with until lists the entry under `expiring` (the day's end, UTC); a replace without
    until keeps it on the new text; a replace with until null clears it; the other store and
    the characters are untouched by any of it."""
    day = in_days(13)
    state = ops(
        client,
        {"target": "user", "action": "add", "content": "In Berlin.", "until": day},
        {"target": "memory", "action": "add", "content": "Uses Postgres."},
    ).json()
    next_day = (audit.now() + timedelta(days=14)).date().isoformat()
    assert state["user"]["expiring"] == [
        {"text": "In Berlin.", "expires_at": f"{next_day}T00:00:00Z"}
    ]
    assert "expiring" not in state["memory"]
    assert state["user"]["characters"] == len("In Berlin.")
    moved = ops(
        client, {"target": "user", "action": "replace", "match": "Berlin", "content": "In Bonn."}
    )
    assert moved.json()["user"]["expiring"] == [
        {"text": "In Bonn.", "expires_at": f"{next_day}T00:00:00Z"}
    ]
    cleared = ops(
        client,
        {
            "target": "user",
            "action": "replace",
            "match": "Bonn",
            "content": "In Bonn.",
            "until": None,
        },
    ).json()
    assert "expiring" not in cleared["user"] and cleared["user"]["entries"] == ["In Bonn."]
    read = client.get("/v1/memory", headers=ALICE).json()
    assert read["user"] == cleared["user"]
    history = client.get("/v1/memory/history", headers=ALICE).json()["changes"]
    assert history[0]["operations"][0]["until_before"] == f"{next_day}T00:00:00Z"
    assert "until_after" not in history[0]["operations"][0]


@pytest.mark.parametrize(
    ("operation", "words"),
    [
        pytest.param(
            {"action": "add", "content": "X.", "until": "2020-01-01"}, "future", id="past"
        ),
        pytest.param({"action": "add", "content": "X.", "until": "soon"}, "ISO 8601", id="not-iso"),
        pytest.param(
            {"action": "add", "content": "X.", "until": "2999-01-01"}, "ten years", id="far"
        ),
        pytest.param(
            {"action": "remove", "match": "tea", "until": in_days(3)}, "remove", id="remove"
        ),
    ],
)
def test_a_bad_until_is_422_and_changes_nothing(
    client: TestClient, operation: dict[str, Any], words: str
) -> None:
    ops(client, {"target": "user", "action": "add", "content": "Prefers tea."})
    before = client.get("/v1/memory", headers=ALICE).json()
    response = ops(client, {"target": "user", **operation})
    assert response.status_code == 422
    assert words in response.json()["error"]["message"]
    assert client.get("/v1/memory", headers=ALICE).json() == before


def test_an_expired_entry_is_gone_frees_its_room_and_undo_restores_it(
    client: TestClient, engine: Engine
) -> None:
    """Past its time the entry is absent from GET (its characters freed, so an add that did not
    fit now does); the write that found it recorded `expired` before its own change; undoing
    that brings the entry back to stay (no expiry)."""
    keep, going = "k" * 1000, "g" * (1375 - 1000 - 3)  # full, delimiter included
    assert ops(client, {"target": "user", "action": "add", "content": keep}).status_code == 200
    full = ops(client, {"target": "user", "action": "add", "content": going, "until": in_days(2)})
    assert full.json()["user"]["characters"] == 1375
    too_much = ops(client, {"target": "user", "action": "add", "content": "Likes tea."})
    assert too_much.status_code == 422 and too_much.json()["error"]["code"] == "capacity_exceeded"
    expire_now(engine)
    read = client.get("/v1/memory", headers=ALICE).json()
    assert read["user"]["entries"] == [keep] and read["user"]["characters"] == 1000
    assert "expiring" not in read["user"]
    fits = ops(client, {"target": "user", "action": "add", "content": "Likes tea."})
    assert fits.status_code == 200 and fits.json()["user"]["entries"] == [keep, "Likes tea."]
    history = client.get("/v1/memory/history", headers=ALICE).json()["changes"]
    assert [change["source"] for change in history[:2]] == ["api", "expired"]
    expired = history[1]
    assert expired["operations"] == [
        {
            "target": "user",
            "action": "remove",
            "before": going,
            "until_before": expired["operations"][0]["until_before"],
        }
    ]
    ops(client, {"target": "user", "action": "remove", "match": "tea"})  # room to undo into
    undone = client.post(f"/v1/memory/history/{expired['id']}/undo", headers=ALICE)
    assert undone.status_code == 200, undone.text
    assert undone.json()["user"]["entries"] == [keep, going]
    assert "expiring" not in undone.json()["user"]


def test_the_purge_records_expiries_of_people_who_write_nothing(
    engine: Engine, db_url: str
) -> None:
    """The purge takes due entries out (history `expired`) and leaves no expiry row behind;
    entries not yet due, and other people's, stay."""
    service = MemoryService(engine)
    for user in ("alice", "bob"):
        with app_client(api_settings(db_url)) as c:
            c.post(
                "/v1/memory/operations",
                headers=dev_auth(user),
                json={
                    "operations": [
                        {
                            "target": "memory",
                            "action": "add",
                            "content": "Sprint ends.",
                            "until": in_days(5),
                        },
                        {"target": "memory", "action": "add", "content": "Uses Postgres."},
                    ]
                },
            )
    expire_now(engine, "alice")
    report = purge(engine, service, ConversationService(engine), RetentionPolicy(), at=audit.now())
    assert report.expired_entries == 1
    assert service.read("alice").memory == ("Uses Postgres.",)
    assert service.read("bob").memory == ("Sprint ends.", "Uses Postgres.")
    with engine.connect() as connection:
        rows = connection.execute(memory_expiries.select()).all()
    assert [row.user_id for row in rows] == ["bob"]
    assert (
        purge(engine, service, ConversationService(engine), RetentionPolicy()).expired_entries == 0
    )


def test_an_entry_expiring_mid_turn_fails_the_turns_edit_of_it_cleanly(
    engine: Engine, db_url: str
) -> None:
    """The turn's prompt held the entry (read before its time); it expires before the commit;
    the model's replace of it is then stale: the `memory` event says failed/stale_match,
    nothing of the batch is written, and the entry stays gone (the purge records `expired`)."""
    service = MemoryService(engine)
    with app_client(api_settings(db_url)) as c:
        c.post(
            "/v1/memory/operations",
            headers=ALICE,
            json={
                "operations": [
                    {
                        "target": "user",
                        "action": "add",
                        "content": "In Berlin.",
                        "until": in_days(3),
                    }
                ]
            },
        )

    async def expire_then_edit(request: ChatRequest) -> Any:
        assert '"In Berlin."' in request.system_text()  # the turn read it before its time
        await asyncio.to_thread(expire_now, engine)
        return memory_call(
            {"target": "user", "action": "replace", "match": "Berlin", "content": "In Bonn now."},
            {"target": "memory", "action": "add", "content": "Likes trains."},
        )

    model = ScriptedModel([expire_then_edit, Text("Noted.")])
    with serve_with_model(api_settings(db_url), model) as url:
        response, events = post_chat(url, ALICE, {"message": "I moved to Bonn"})
    memory_event = next(e for e in events if e.event == "memory")
    assert memory_event.data["outcome"] == "failed"
    assert memory_event.data["reason"] == "stale_match"
    assert service.read("alice").user == () and service.read("alice").memory == ()
    purge(engine, service, ConversationService(engine), RetentionPolicy(), at=audit.now())
    with engine.connect() as connection:
        entries = history.page(connection, "alice", limit=5) or []
    assert [entry.provenance.source for entry in entries] == ["expired", "api"]
    assert entries[0].changes[0].before == "In Berlin."
    model.assert_done()


def test_the_offline_model_remembers_a_time_bound_fact_until_its_day(
    engine: Engine, db_url: str
) -> None:
    """ "I'm in Berlin until <date>" through the built-in model: saved as a user fact that
    expires when that day ends."""
    day = in_days(10)
    with serve_with_model(api_settings(db_url), None) as url:
        response, events = post_chat(url, ALICE, {"message": f"I'm in Berlin until {day}"})
    assert [e.data["outcome"] for e in events if e.event == "memory"] == ["committed"]
    with app_client(api_settings(db_url)) as c:
        state = c.get("/v1/memory", headers=ALICE).json()
    assert state["user"]["entries"] == ["The user is in Berlin."]
    end = (audit.now() + timedelta(days=11)).date().isoformat()
    assert state["user"]["expiring"] == [
        {"text": "The user is in Berlin.", "expires_at": f"{end}T00:00:00Z"}
    ]
