"""`GET /v1/memory/export` is streamed a page at a time, through real uvicorn on every dialect:
with EXPORT_PAGE_ROWS rows per page, a history, a conversation list and a conversation's
messages of exactly a page and of a page and one more are exported whole and in order, in the
documented shape; the body is sent in pieces (no Content-Length), never built whole."""

from __future__ import annotations

import uuid

import httpx
import pytest
from sqlalchemy import Engine

from app.conversations import repository as transcripts
from app.main import create_app
from tests.support.apps import api_settings
from tests.support.server import live_server
from tests.support.tokens import dev_auth

PAGE = 3


def store(engine: Engine, user: str, conversations: int, messages: int) -> list[str]:
    ids = sorted(str(uuid.uuid4()) for _ in range(conversations))
    with engine.begin() as connection:
        for conversation in ids:
            transcripts.create(connection, conversation, user, f"Talk {conversation[:8]}")
            for n in range(messages):
                transcripts.add_message(
                    connection, conversation, str(uuid.uuid4()), "user", f"message {n}", "complete"
                )
    return ids


@pytest.mark.parametrize("rows", [PAGE, PAGE + 1], ids=["a-page", "a-page-and-one"])
def test_pages_at_and_past_the_bound_export_everything_in_order(
    engine: Engine, db_url: str, rows: int
) -> None:
    """Invariant: the streamed export holds every change, conversation and message, in order,
    whether their number is a whole page or one more; another user's rows never."""
    ids = store(engine, "alice", rows, rows)
    store(engine, "bob", 2, 2)
    settings = api_settings(db_url, export_page_rows=PAGE)
    with live_server(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as client:
        for n in range(rows):
            client.post(
                "/v1/memory/operations",
                headers=dev_auth("alice"),
                json={"operations": [{"target": "user", "action": "add", "content": f"F{n}."}]},
            ).raise_for_status()
        with client.stream("GET", "/v1/memory/export", headers=dev_auth("alice")) as response:
            assert response.status_code == 200
            assert "content-length" not in response.headers
            assert response.headers["content-disposition"].startswith("attachment;")
            body = httpx.Response(200, content=response.read()).json()
    assert list(body) == [
        "exported_at",
        "subject",
        "memory",
        "settings",
        "projects",
        "history",
        "proposals",
        "expired_proposals",
        "usage",
        "conversations",
    ]
    assert body["subject"] == "alice"
    assert body["settings"] == {"save_mode": "auto", "recall_chats": None}
    assert body["projects"] == []
    assert [change["operations"][0]["after"] for change in body["history"]] == [
        f"F{n}." for n in reversed(range(rows))
    ]
    assert [conversation["id"] for conversation in body["conversations"]] == ids
    for conversation in body["conversations"]:
        assert set(conversation) == {
            "id",
            "title",
            "created_at",
            "updated_at",
            "project_id",
            "messages",
        }
        assert [m["content"] for m in conversation["messages"]] == [
            f"message {n}" for n in range(rows)
        ]
        assert set(conversation["messages"][0]) == {
            "role",
            "content",
            "status",
            "turn_id",
            "created_at",
            "superseded_by",
        }
