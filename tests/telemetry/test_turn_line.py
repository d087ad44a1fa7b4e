"""A turn's last log line, `turn.finished`, sums the turn up: its conversation, memory status,
rounds and outcome, after `turn.started` and one `llm.round` per model call. Read from the
records every handler on the root logger receives."""

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


def test_a_turns_last_line_sums_it_up(sqlite_url: str, lines: RecordingHandler) -> None:
    model = ScriptedModel([memory_call(FACT), Text("Noted.")])
    with serve_with_model(api_settings(sqlite_url, log_level="INFO"), model) as url:
        conversation = chat(url)
    seen = turn_lines(lines)
    assert [line["event"] for line in seen] == [
        "turn.started",
        "llm.round",
        "llm.round",
        "turn.finished",
    ]
    finished = seen[-1]
    assert finished["conversation_id"] == conversation == seen[0]["conversation_id"]
    assert finished["memory_status"] == "available"
    assert finished["outcome"] == "stop" and finished["rounds"] == 2
    assert finished["turn_id"] == seen[0]["turn_id"]
