"""At LOG_LEVEL=INFO a turn writes one line, `turn.finished`, carrying what the DEBUG lines
`turn.started` and `llm.round` say (the conversation, the memory status, the rounds); at DEBUG
those lines are back. Read from the records every handler on the root logger receives."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.apps import api_settings
from tests.support.scripted import ScriptedModel, Text, memory_call, serve_with_model
from tests.support.sse import first, iter_events
from tests.support.tokens import dev_auth
from tests.telemetry.capture import RecordingHandler

FACT = {"target": "user", "action": "add", "content": "The user prefers short answers."}


@pytest.fixture
def lines() -> Iterator[RecordingHandler]:
    handler = RecordingHandler()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


def turn_lines(handler: RecordingHandler) -> list[dict[str, Any]]:
    return [
        dict(record.msg)
        for record in handler.records
        if isinstance(record.msg, dict)
        and str(record.msg.get("event", "")).startswith(("turn.", "llm."))
    ]


def chat(url: str) -> str:
    with (
        httpx.Client(base_url=url, timeout=30) as client,
        client.stream(
            "POST", "/v1/chat", json={"message": "Keep it short."}, headers=dev_auth("liner")
        ) as response,
    ):
        events = list(iter_events(response))
    return str(first(events, "start").data["conversation_id"])


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_a_turn_writes_one_info_line_that_sums_it_up(
    sqlite_url: str, lines: RecordingHandler, level: str
) -> None:
    model = ScriptedModel([memory_call(FACT), Text("Noted.")])
    with serve_with_model(api_settings(sqlite_url, log_level=level), model) as url:
        conversation = chat(url)
    seen = turn_lines(lines)
    finished = [line for line in seen if line["event"] == "turn.finished"]
    assert len(finished) == 1
    assert finished[0]["conversation_id"] == conversation
    assert finished[0]["memory_status"] == "available"
    assert finished[0]["outcome"] == "stop" and finished[0]["rounds"] == 2
    assert finished[0]["turn_id"]
    events = [line["event"] for line in seen]
    if level == "INFO":
        assert events == ["turn.finished"]
    else:
        assert events == ["turn.started", "llm.round", "llm.round", "turn.finished"]
