"""The model is told the person's save mode, and the answer says what happens: under `ask` the
system prompt and the memory_update result say the change awaits approval and the offline model
answers "I'll ask you before saving that." (on /v1/chat and on the OpenAI-compatible route);
under `auto` it answers "Saved.". Real HTTP on every dialect."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.memory.provenance import SaveMode
from tests.api.test_ask_mode_turns import ask_first
from tests.api.test_turn_end import read_until, server, user_id
from tests.support.apps import api_settings
from tests.support.scripted import ScriptedModel, Text, memory_call
from tests.support.server import live_server
from tests.support.sse import text_of
from tests.support.tokens import dev_auth

FACT = {"target": "user", "action": "add", "content": "The user prefers short answers."}
ASK_PARAGRAPH = 'The user has chosen "Ask before saving"'


@contextmanager
def offline_server(db_url: str) -> Iterator[str]:
    """The app with no model configured: the built-in offline model answers."""
    with live_server(create_app(api_settings(db_url))) as url:
        yield url


def set_mode(url: str, user: str, mode: SaveMode) -> None:
    if mode == "ask":
        ask_first(url, user)


@pytest.mark.parametrize(
    ("mode", "remember", "forget"),
    [
        ("auto", "Saved.", "Forgotten."),
        ("ask", "I'll ask you before saving that.", "I'll ask you before forgetting that."),
    ],
    ids=["auto-says-saved", "ask-says-it-will-ask"],
)
def test_the_offline_answer_says_what_the_save_mode_does(
    db_url: str, mode: SaveMode, remember: str, forget: str
) -> None:
    """The same request answers differently by save mode, on both routes; under `ask` nothing
    is in memory afterwards (the answer's promise is kept)."""
    user = user_id()
    with offline_server(db_url) as url:
        set_mode(url, user, mode)
        events = read_until(url, user, {"message": "remember that I prefer short answers"}, _no)
        assert text_of(events) == remember
        response = httpx.post(
            f"{url}/openai/v1/chat/completions",
            headers=dev_auth(user),
            json={
                "model": model_name(url, user),
                "messages": [{"role": "user", "content": "remember that my name is Ann"}],
            },
            timeout=30,
        )
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["message"]["content"] == remember
        stored = httpx.get(f"{url}/v1/memory", headers=dev_auth(user)).json()["user"]["entries"]
        assert stored == (
            [] if mode == "ask" else ["The user prefers short answers.", "The user's name is Ann."]
        )
        if mode == "auto":
            events = read_until(url, user, {"message": "forget that I prefer short answers"}, _no)
            assert text_of(events) == forget


@pytest.mark.parametrize("mode", ["auto", "ask"], ids=["auto", "ask"])
def test_the_prompt_and_the_tool_result_carry_the_save_mode(db_url: str, mode: SaveMode) -> None:
    """Under `ask` the system prompt has the ask paragraph and the tool's staged result names
    the mode and says the change awaits approval; under `auto` neither does."""
    user = user_id()
    model = ScriptedModel([memory_call(FACT), Text("Noted.")])
    with server(db_url, model) as (url, _runtime):
        set_mode(url, user, mode)
        read_until(url, user, {"message": "I prefer short answers"}, _no)
    first_request, after_tool = model.requests
    assert (ASK_PARAGRAPH in first_request.system_text()) is (mode == "ask")
    result: dict[str, Any] = json.loads(after_tool.messages[-1]["content"])
    assert result["status"] == "staged" and result["save_mode"] == mode
    assert ("approval" in result["note"]) is (mode == "ask")
    model.assert_done()


def model_name(url: str, user: str) -> str:
    name: str = httpx.get(f"{url}/openai/v1/models", headers=dev_auth(user)).json()["data"][0]["id"]
    return name


def _no(_event: object) -> bool:
    return False
