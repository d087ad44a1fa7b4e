"""Regenerate, edit-and-resend and titles over real HTTP on every dialect: a turn that
`replaces` another keeps the replaced messages (marked `superseded_by`, never deleted), the
model reads only the current transcript before it, the replaced turn's committed memory stays,
each turn's writes are its own; a conversation is titled from its first message and renamed
only by its owner, with a checked title."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from tests.api.test_turn_end import server, user_id
from tests.support.scripted import ScriptedModel, Text, memory_call
from tests.support.sse import Event, first, text_of
from tests.support.sse import post_chat as post
from tests.support.tokens import dev_auth

TEA = {"target": "user", "action": "add", "content": "The user drinks tea."}
COFFEE = {"target": "user", "action": "add", "content": "The user drinks coffee."}


def chat(url: str, user: str, **body: Any) -> list[Event]:
    response, events = post(url, dev_auth(user), body)
    assert response.status_code == 200, response.text
    return events


def ids(events: list[Event]) -> tuple[str, str]:
    start = first(events, "start").data
    return start["conversation_id"], start["turn_id"]


def transcript(url: str, user: str, conversation: str) -> dict[str, Any]:
    response = httpx.get(
        f"{url}/v1/conversations/{conversation}", headers=dev_auth(user), timeout=30
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def spoken(request: Any) -> list[tuple[str, str]]:
    """The non-system messages a model request carried."""
    return [(m["role"], m["content"]) for m in request.messages if m["role"] != "system"]


def test_regenerate_keeps_the_earlier_answer_as_replaced_and_the_model_reads_only_before_it(
    engine: Engine, db_url: str
) -> None:
    """Turn 2 regenerates turn 1: the transcript holds all four messages, turn 1's marked
    `superseded_by` turn 2; turn 2's model request carries no trace of turn 1; turn 3 reads
    turn 2 only."""
    user = user_id()
    model = ScriptedModel([Text("First answer."), Text("Second answer."), Text("Third.")])
    with server(db_url, model) as (url, _runtime):
        conversation, turn_1 = ids(chat(url, user, message="Name a colour"))
        regenerated = chat(
            url, user, message="Name a colour", conversation_id=conversation, replaces=turn_1
        )
        _, turn_2 = ids(regenerated)
        chat(url, user, message="Another?", conversation_id=conversation)
        messages = transcript(url, user, conversation)["messages"]
    assert text_of(regenerated) == "Second answer."
    assert [(m["turn_id"], m["content"], m["superseded_by"]) for m in messages[:4]] == [
        (turn_1, "Name a colour", turn_2),
        (turn_1, "First answer.", turn_2),
        (turn_2, "Name a colour", None),
        (turn_2, "Second answer.", None),
    ]
    assert spoken(model.requests[1]) == [("user", "Name a colour")]
    assert spoken(model.requests[2]) == [
        ("user", "Name a colour"),
        ("assistant", "Second answer."),
        ("user", "Another?"),
    ]
    model.assert_done()


def test_editing_an_earlier_message_replaces_it_and_every_later_turn(
    engine: Engine, db_url: str
) -> None:
    """Editing turn 1 of two: both earlier turns are replaced by the new one (kept in order);
    the model reads nothing before the edited message."""
    user = user_id()
    model = ScriptedModel([Text("A."), Text("B."), Text("C.")])
    with server(db_url, model) as (url, _runtime):
        conversation, turn_1 = ids(chat(url, user, message="one"))
        chat(url, user, message="two", conversation_id=conversation)
        _, turn_3 = ids(
            chat(url, user, message="one, edited", conversation_id=conversation, replaces=turn_1)
        )
        messages = transcript(url, user, conversation)["messages"]
    assert [(m["content"], m["superseded_by"]) for m in messages] == [
        ("one", turn_3),
        ("A.", turn_3),
        ("two", turn_3),
        ("B.", turn_3),
        ("one, edited", None),
        ("C.", None),
    ]
    assert spoken(model.requests[2]) == [("user", "one, edited")]
    model.assert_done()


@pytest.mark.parametrize(
    ("case", "status", "code"),
    [
        ("unknown-turn", 404, "turn_not_found"),
        ("already-replaced", 404, "turn_not_found"),
        ("other-conversation", 404, "turn_not_found"),
        ("not-an-id", 404, "turn_not_found"),
        ("no-conversation", 422, "invalid_request"),
        ("other-users-conversation", 404, "not_found"),
    ],
    ids=lambda value: value if isinstance(value, str) and "-" in value else "",
)
def test_a_turn_that_replaces_nothing_current_is_refused_before_anything_is_stored(
    engine: Engine, db_url: str, case: str, status: int, code: str
) -> None:
    """`replaces` must name a turn of the conversation's current transcript; the refusal
    stores nothing and calls no model."""
    user = user_id()
    model = ScriptedModel([Text("A."), Text("B."), Text("C."), Text("D.")])
    with server(db_url, model) as (url, _runtime):
        conversation, turn_1 = ids(chat(url, user, message="one"))
        _, turn_2 = ids(
            chat(url, user, message="one", conversation_id=conversation, replaces=turn_1)
        )
        other, other_turn = ids(chat(url, user, message="elsewhere"))
        bob = user_id()
        bobs, bobs_turn = ids(chat(url, bob, message="bob's"))
        body: dict[str, Any] = {
            "unknown-turn": {"conversation_id": conversation, "replaces": other_turn[::-1]},
            "already-replaced": {"conversation_id": conversation, "replaces": turn_1},
            "other-conversation": {"conversation_id": conversation, "replaces": other_turn},
            "not-an-id": {"conversation_id": conversation, "replaces": "x\x00"},
            "no-conversation": {"replaces": turn_2},
            "other-users-conversation": {"conversation_id": bobs, "replaces": bobs_turn},
        }[case]
        response, events = post(url, dev_auth(user), {"message": "again", **body})
        after = transcript(url, user, conversation)["messages"]
    assert (response.status_code, response.json()["error"]["code"]) == (status, code)
    assert events == [] and len(after) == 4 and other
    model.assert_done()


def test_a_regenerated_turn_commits_its_own_writes_and_the_earlier_ones_stay(
    engine: Engine, db_url: str
) -> None:
    """Turn 1 saves tea; turn 2 regenerates it and saves coffee: memory holds both (the
    replaced turn's committed write is not undone), and each history change names its turn."""
    user = user_id()
    model = ScriptedModel([memory_call(TEA), Text("Tea."), memory_call(COFFEE), Text("Coffee.")])
    with server(db_url, model) as (url, _runtime):
        conversation, turn_1 = ids(chat(url, user, message="what do I drink"))
        regenerated = chat(
            url, user, message="what do I drink", conversation_id=conversation, replaces=turn_1
        )
        _, turn_2 = ids(regenerated)
        memory = httpx.get(f"{url}/v1/memory", headers=dev_auth(user)).json()
        history = httpx.get(f"{url}/v1/memory/history", headers=dev_auth(user)).json()
    assert first(regenerated, "memory").data["outcome"] == "committed"
    assert memory["user"]["entries"] == [TEA["content"], COFFEE["content"]]
    assert [(c["turn_id"], c["operations"][0]["after"]) for c in history["changes"]] == [
        (turn_2, COFFEE["content"]),
        (turn_1, TEA["content"]),
    ]
    model.assert_done()


@pytest.mark.parametrize(
    ("message", "title"),
    [
        ("Please can you help me plan a trip to Lisbon in May?", "Plan a trip to Lisbon in May"),
        ("remember that I prefer short answers", "I prefer short answers"),
        ("hi", "New conversation"),
        ("Tabs or spaces? Settle it.\nThanks", "Tabs or spaces"),
    ],
    ids=["openers-dropped", "remember", "only-an-opener", "first-sentence"],
)
def test_a_new_conversation_is_titled_from_its_first_message(
    engine: Engine, db_url: str, message: str, title: str
) -> None:
    """The title is a few words of the first sentence, openers dropped, deterministic."""
    user = user_id()
    model = ScriptedModel([Text("Sure.")])
    with server(db_url, model) as (url, _runtime):
        conversation, _ = ids(chat(url, user, message=message))
        assert transcript(url, user, conversation)["title"] == title
    model.assert_done()


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"title": "  Lisbon   in May "}, 200),
        ({"title": ""}, 422),
        ({"title": "   "}, 422),
        ({"title": "two\nlines"}, 422),
        ({"title": "x" * 201}, 422),
        ({"title": 5}, 422),
        ({"title": "ok", "colour": "red"}, 422),  # `pinned` and `archived` are fields now
    ],
    ids=["renamed", "empty", "blank", "control-character", "too-long", "not-text", "extra-field"],
)
def test_only_the_owner_renames_with_a_checked_title(
    engine: Engine, db_url: str, body: dict[str, Any], status: int
) -> None:
    """PATCH sets the title (whitespace collapsed) for the owner; a bad title is 422 and
    changes nothing; another user's PATCH is 404 and changes nothing."""
    user = user_id()
    model = ScriptedModel([Text("Sure.")])
    with server(db_url, model) as (url, _runtime):
        conversation, _ = ids(chat(url, user, message="trip planning"))
        path = f"{url}/v1/conversations/{conversation}"
        stranger = httpx.patch(path, headers=dev_auth(user_id()), json={"title": "Mine now"})
        response = httpx.patch(path, headers=dev_auth(user), json=body)
        listed = httpx.get(f"{url}/v1/conversations", headers=dev_auth(user)).json()
    assert stranger.status_code == 404
    assert response.status_code == status, response.text
    expected = "Lisbon in May" if status == 200 else "Trip planning"
    assert [c["title"] for c in listed["conversations"]] == [expected]
    if status == 200:
        assert response.json()["title"] == expected
    model.assert_done()


def ui_message(role: str, text: str, message_id: str) -> dict[str, Any]:
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": text}]}


def ui_chat(url: str, user: str, body: dict[str, Any]) -> list[Event]:
    """A turn in the AI SDK's protocol: its `start` chunk's metadata, as a `start` event."""
    with httpx.Client(base_url=url, timeout=30) as client:
        response = client.post("/v1/chat?protocol=ai-sdk", json=body, headers=dev_auth(user))
    assert response.status_code == 200, response.text
    chunks = [
        line.removeprefix("data: ")
        for line in response.text.splitlines()
        if line.startswith("data: {")
    ]
    start = next(json.loads(chunk) for chunk in chunks if '"type":"start"' in chunk)
    return [Event("start", start["messageMetadata"])]


def test_the_ai_sdk_regenerate_and_edit_replace_the_turn_they_name(
    engine: Engine, db_url: str
) -> None:
    """useChat's bodies: regenerate() names the answer (`msg_<turn>`) or, with no id, replaces
    the turn after the last answer the client kept; an edit (`submit-message` with the edited
    message's id) replaces the turn after the answer before it. Each keeps the replaced turn as
    superseded, and the model reads only what comes before it."""
    user = user_id()
    model = ScriptedModel([Text(f"Answer {n}.") for n in range(5)])
    with server(db_url, model) as (url, _runtime):
        conversation, turn_1 = ids(chat(url, user, message="First?"))
        _, turn_2 = ids(chat(url, user, message="Second?", conversation_id=conversation))
        kept = [
            ui_message("user", "First?", "u1"),
            ui_message("assistant", "Answer 0.", f"msg_{turn_1}"),
            ui_message("user", "Second?", "u2"),
        ]
        meta = {"conversation_id": conversation}
        _, turn_3 = ids(
            ui_chat(url, user, {"messages": kept, "trigger": "regenerate-message", **meta})
        )
        _, turn_4 = ids(
            ui_chat(
                url,
                user,
                {
                    "messages": kept,
                    "trigger": "regenerate-message",
                    "messageId": f"msg_{turn_3}",
                    **meta,
                },
            )
        )
        edited = [*kept[:2], ui_message("user", "Second, edited?", "u2")]
        _, turn_5 = ids(
            ui_chat(
                url,
                user,
                {"messages": edited, "trigger": "submit-message", "messageId": "u2", **meta},
            )
        )
        messages = transcript(url, user, conversation)["messages"]
    assert [(m["turn_id"], m["superseded_by"]) for m in messages] == [
        (turn_1, None),
        (turn_1, None),
        (turn_2, turn_3),
        (turn_2, turn_3),
        (turn_3, turn_4),
        (turn_3, turn_4),
        (turn_4, turn_5),
        (turn_4, turn_5),
        (turn_5, None),
        (turn_5, None),
    ]
    assert messages[8]["content"] == "Second, edited?"
    for request in model.requests[2:]:
        assert spoken(request)[:2] == [("user", "First?"), ("assistant", "Answer 0.")]
        assert len(spoken(request)) == 3
    model.assert_done()
