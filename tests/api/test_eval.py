"""`POST /v1/eval/chat`: key-protected, memory-free, no transcript, the same event stream."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import Engine, insert

from app.db.schema import agent_memory
from app.db.writers import maintenance
from tests.support.apps import api_settings, memory_rows
from tests.support.scripted import ScriptedModel, Text, memory_call, serve_with_model
from tests.support.sse import first, post_chat, without_deltas
from tests.support.tokens import dev_auth

KEY = "eval-key-0123456789abcdef"
PATH = "/v1/eval/chat"


def test_route_is_absent_without_a_configured_key(db: Engine, sqlite_url: str) -> None:
    """EVAL_API_KEY unset: 404 whatever the caller sends."""
    model = ScriptedModel([])
    with serve_with_model(api_settings(sqlite_url), model) as url:
        response = httpx.post(url + PATH, json={"message": "hi"}, headers={"X-Eval-Key": "x"})
    assert response.status_code == 404
    model.assert_done()


@pytest.mark.parametrize(
    "headers",
    [{}, {"X-Eval-Key": "wrong"}, {"X-Eval-Key": KEY + "x"}],
    ids=["missing", "wrong", "longer"],
)
def test_a_wrong_key_is_401(db: Engine, sqlite_url: str, headers: dict[str, str]) -> None:
    """A missing or wrong X-Eval-Key is refused before any model call."""
    model = ScriptedModel([])
    with serve_with_model(api_settings(sqlite_url, eval_api_key=KEY), model) as url:
        response = httpx.post(url + PATH, json={"message": "hi"}, headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_eval_key"
    model.assert_done()


def test_eval_turns_are_memory_free(db: Engine, sqlite_url: str) -> None:
    """No identity, no memory read, no tool offered, status disabled, no conversation stored;
    a bearer token changes nothing; a tool call the model makes anyway writes nothing."""
    with db.begin() as connection, maintenance(connection):
        connection.execute(
            insert(agent_memory).values(
                user_id="alice", memory_type="user", content="The user is sentinel-EVAL-55."
            )
        )
    model = ScriptedModel(
        [
            memory_call({"target": "user", "action": "add", "content": "The user is evil."}),
            Text("Evaluated."),
        ]
    )
    headers = {"X-Eval-Key": KEY, **dev_auth("alice")}
    with serve_with_model(api_settings(sqlite_url, eval_api_key=KEY), model) as url:
        response, events = post_chat(url, headers, {"message": "hi"}, path=PATH)
        listed = httpx.get(url + "/v1/conversations", headers=dev_auth("alice")).json()
    assert response.status_code == 200
    assert without_deltas(events) == ["start", "tool", "delta", "memory", "done"]
    assert events[0].data == {
        "conversation_id": None,
        "turn_id": events[0].data["turn_id"],
        "memory": {"status": "disabled"},
        "transcript": {"status": "disabled"},  # no conversation is stored for evaluators
    }
    assert first(events, "tool").data["outcome"] == "rejected"
    assert model.requests[0].tools == ()
    assert "sentinel-EVAL-55" not in model.requests[0].system_text()
    assert "<persistent_memory_data" not in model.requests[0].system_text()
    assert memory_rows(db) == 1 and listed == {"conversations": []}
    model.assert_done()
