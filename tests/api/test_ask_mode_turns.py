"""Turns under each save mode, over real HTTP with the scripted model on every dialect: under
`ask` a completed turn's staged batch becomes a proposal (the memory event says `proposed`),
never enters a prompt, and a cut turn leaves none; under `auto` the commit records its turn and
conversation in the history. Cuts are driven with gates, never with sleeps."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import Engine

from app.memory.provenance import Provenance
from app.memory.service import MemoryService
from tests.api.test_turn_end import assistant_rows, read_until, server, user_id
from tests.support.apps import memory_rows
from tests.support.gates import Gates
from tests.support.scripted import HeldText, ScriptedModel, Text, memory_call
from tests.support.sse import Event, first, names
from tests.support.tokens import dev_auth
from tests.support.waiting import wait_for

FACT = {"target": "user", "action": "add", "content": "The user keeps bees on the roof."}
ANSWER = "Noted, I will suggest it once you decide."


def ask_first(url: str, user: str) -> None:
    response = httpx.put(
        f"{url}/v1/memory/settings", headers=dev_auth(user), json={"save_mode": "ask"}
    )
    assert response.status_code == 200, response.text


def proposals(url: str, user: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{url}/v1/memory/proposals", headers=dev_auth(user))
    assert response.status_code == 200, response.text
    result: list[dict[str, Any]] = response.json()["proposals"]
    return result


def test_under_ask_a_completed_turn_proposes_and_the_proposal_stays_out_of_the_prompt(
    engine: Engine, db_url: str
) -> None:
    """The memory event says `proposed` with the stored (unchanged) counts; the proposal names
    the turn and conversation; the next turn's system prompt does not carry it; accepting it
    puts it in memory and the turn after that sees it."""
    user = user_id()
    model = ScriptedModel([memory_call(FACT), Text(ANSWER), Text("Hello."), Text("Hello.")])
    with server(db_url, model) as (url, _runtime):
        ask_first(url, user)
        events = read_until(url, user, {"message": "I keep bees"}, lambda e: False)
        assert names(events)[-1] == "done"
        memory = first(events, "memory").data
        assert memory == {"outcome": "proposed", "user_characters": 0, "memory_characters": 0}
        start = first(events, "start").data
        [proposal] = proposals(url, user)
        assert proposal["turn_id"] == start["turn_id"]
        assert proposal["conversation_id"] == start["conversation_id"]
        assert proposal["operations"] == [FACT]
        assert memory_rows(engine, user) == 0

        read_until(url, user, {"message": "hi"}, lambda e: False)
        assert FACT["content"] not in model.requests[-1].system_text()
        accepted = httpx.post(
            f"{url}/v1/memory/proposals/{proposal['id']}/accept", headers=dev_auth(user)
        )
        assert accepted.status_code == 200, accepted.text
        read_until(url, user, {"message": "hi again"}, lambda e: False)
        assert FACT["content"] in model.requests[-1].system_text()
    model.assert_done()


def test_under_ask_a_cut_turn_leaves_no_proposal(engine: Engine, db_url: str) -> None:
    """The model stages, then its answer is held before the finishing chunk; the client leaves;
    the gate opens only after the server saw the cut: no proposal, no memory, and the row is
    `interrupted`. A control turn through the same gate does propose."""
    user = user_id()
    gates = Gates()
    model = ScriptedModel(
        [
            memory_call(FACT),
            HeldText(ANSWER, gates, "cut"),
            memory_call(FACT),
            HeldText(ANSWER, gates, "control"),
        ]
    )
    with server(db_url, model) as (url, _runtime):
        ask_first(url, user)

        def leave_when_held(event: Event) -> bool:
            if event.event != "delta":
                return False
            wait_for(lambda: "cut" in gates.held, "the answer held at its last chunk")
            return True

        events = read_until(url, user, {"message": "I keep bees"}, leave_when_held)
        conversation_id = events[0].data["conversation_id"]
        wait_for(lambda: assistant_rows(url, user, conversation_id), "the cut turn's row")
        gates.release("cut")
        assert [r["status"] for r in assistant_rows(url, user, conversation_id)] == ["interrupted"]
        assert proposals(url, user) == []

        def open_gate(event: Event) -> bool:
            if event.event == "tool":
                gates.release("control")
            return False

        control = read_until(url, user, {"message": "again"}, open_gate)
        assert first(control, "memory").data["outcome"] == "proposed"
        assert len(proposals(url, user)) == 1
    assert memory_rows(engine, user) == 0


def test_under_auto_a_turn_commit_records_its_turn_and_conversation(
    engine: Engine, db_url: str
) -> None:
    """The history entry of a committed turn is `turn` with the turn's and conversation's ids,
    and the operation's after."""
    user = user_id()
    model = ScriptedModel([memory_call(FACT), Text(ANSWER)])
    with server(db_url, model) as (url, _runtime):
        events = read_until(url, user, {"message": "I keep bees"}, lambda e: False)
        assert first(events, "memory").data["outcome"] == "committed"
        start = first(events, "start").data
        response = httpx.get(f"{url}/v1/memory/history", headers=dev_auth(user))
        [change] = response.json()["changes"]
    assert change["source"] == "turn"
    assert (change["turn_id"], change["conversation_id"]) == (
        start["turn_id"],
        start["conversation_id"],
    )
    assert change["operations"] == [{"target": "user", "action": "add", "after": FACT["content"]}]
    # The turn's own change can be undone like any other.
    MemoryService(engine).commit_operations(
        user, [], provenance=Provenance("undo", undoes=change["id"])
    )
    assert memory_rows(engine, user) == 0
