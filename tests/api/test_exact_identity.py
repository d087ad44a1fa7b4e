"""Identity is exact on every database: subjects that differ only in case, accents (precomposed
or combining), width or spaces are different users for memory, turns, conversations and forget.

The test databases use the server's default collation (case- and accent-insensitive, PAD SPACE
on MariaDB), so only the schema's own types can make these pass.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import Engine

from app.conversations.service import is_conversation_id
from tests.support.apps import api_settings, memory_rows
from tests.support.scripted import serve_with_model
from tests.support.sse import first, post_chat, text_of
from tests.support.tokens import dev_auth

OWNER = "alice"
# Each is a distinct user; under a case/accent-insensitive or PAD SPACE comparison some would
# be `alice`.
LOOKALIKES = {
    "upper": "ALICE",
    "title": "Alice",
    "precomposed-accent": "\u00e1lice",
    "combining-accent": "a\u0301lice",
    "accent-on-e": "alic\u00e9",
    "trailing-space": "alice ",
    "two-trailing-spaces": "alice  ",
    "leading-space": " alice",
    "fullwidth-a": "\uff41lice",
    "trailing-nbsp": "alice\u00a0",
    "zero-width-joiner": "ali\u200dce",
}
SUBJECTS = {"owner": OWNER, **LOOKALIKES}


@pytest.fixture
def url(engine: Engine, db_url: str) -> Iterator[str]:
    with serve_with_model(api_settings(db_url)) as base:
        yield base


def fact_of(label: str) -> str:
    return f"The user is known here as the {label} account."


def add_fact(client: httpx.Client, subject: str, fact: str) -> None:
    response = client.post(
        "/v1/memory/operations",
        headers=dev_auth(subject),
        json={"operations": [{"target": "user", "action": "add", "content": fact}]},
    )
    assert response.status_code == 200, (subject, response.text)


def user_entries(client: httpx.Client, subject: str) -> list[str]:
    response = client.get("/v1/memory", headers=dev_auth(subject))
    assert response.status_code == 200, (subject, response.text)
    entries: list[str] = response.json()["user"]["entries"]
    return entries


def test_lookalike_subjects_have_separate_memory_and_forget_only_their_own(
    url: str, engine: Engine
) -> None:
    """Every subject writes one fact; each reads back exactly its own, a turn's prompt holds
    only its own, and `DELETE /v1/memory` by the owner erases the owner's rows and no one
    else's."""
    with httpx.Client(base_url=url, timeout=30) as client:
        for label, subject in SUBJECTS.items():
            add_fact(client, subject, fact_of(label))
        for label, subject in SUBJECTS.items():
            assert user_entries(client, subject) == [fact_of(label)], label
        assert memory_rows(engine) == len(SUBJECTS)

        for label, subject in SUBJECTS.items():
            _, events = post_chat(url, dev_auth(subject), {"message": "what do you remember?"})
            answer = text_of(events)
            assert fact_of(label) in answer, (label, answer)
            others = [fact_of(other) for other in SUBJECTS if other != label]
            assert not [fact for fact in others if fact in answer], (label, answer)

        assert client.delete("/v1/memory", headers=dev_auth(OWNER)).status_code == 204
        assert user_entries(client, OWNER) == []
        for label, subject in LOOKALIKES.items():
            assert user_entries(client, subject) == [fact_of(label)], label
        assert memory_rows(engine, OWNER) == 0
        assert memory_rows(engine) == len(LOOKALIKES)


def test_lookalike_subjects_never_reach_each_others_conversations(url: str) -> None:
    """Each subject's turn opens its own conversation; the listing shows only it; the owner's
    conversation is 404 to every look-alike (read, delete, continue) and theirs to the owner."""
    conversations: dict[str, str] = {}
    for label, subject in SUBJECTS.items():
        response, events = post_chat(url, dev_auth(subject), {"message": f"hello from {label}"})
        assert response.status_code == 200, (label, response.text)
        conversation_id = first(events, "start").data["conversation_id"]
        assert conversation_id is not None and is_conversation_id(conversation_id), label
        conversations[label] = conversation_id

    with httpx.Client(base_url=url, timeout=30) as client:
        for label, subject in SUBJECTS.items():
            listed = client.get("/v1/conversations", headers=dev_auth(subject)).json()
            assert [c["id"] for c in listed["conversations"]] == [conversations[label]], label

        owners = conversations["owner"]
        for label, subject in LOOKALIKES.items():
            theirs = conversations[label]
            for reader, conversation_id in ((subject, owners), (OWNER, theirs)):
                path = f"/v1/conversations/{conversation_id}"
                assert client.get(path, headers=dev_auth(reader)).status_code == 404, label
                assert client.delete(path, headers=dev_auth(reader)).status_code == 404, label
                turn, _ = post_chat(
                    url, dev_auth(reader), {"message": "hi", "conversation_id": conversation_id}
                )
                assert turn.status_code == 404, label

        for label, subject in SUBJECTS.items():
            body = client.get(
                f"/v1/conversations/{conversations[label]}", headers=dev_auth(subject)
            ).json()
            assert body["messages"][0]["content"] == f"hello from {label}", label
