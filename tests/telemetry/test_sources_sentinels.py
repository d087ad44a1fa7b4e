"""The sources of an answer and recall of earlier chats never reach logs or spans.

A real server (uvicorn) at LOG_LEVEL=DEBUG, with SQLAlchemy's loggers re-opened at DEBUG: a
sentinel enters as a memory entry (so it is in the prompt and in the turn's `sources`), another
in an earlier conversation that recall brings into the next turn's prompt and sources; both are
read back (the `sources` event, the stored answer, the export). Every log record,
stdout/stderr and every finished span is searched; a control run with the redaction layers off
shows the same run does leak them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from app.offline.wire import ChatRequest, Text
from tests.support.scripted import Reply
from tests.support.sse import first, iter_events
from tests.telemetry.capture import Captured, live_run
from tests.telemetry.test_sentinels import redaction_disabled

IN_MEMORY = "SNTL-S1M-source-memory-MARMOT-21"
RECALLED = "SNTL-S2R-source-recalled-IBEX-43"
SENTINELS = [IN_MEMORY, RECALLED]

__all__ = ["redaction_disabled"]  # a fixture this module uses


async def answer(request: ChatRequest) -> Reply:
    return Text("Noted.")


def drive(base: str, auth: dict[str, str]) -> None:
    def call(method: str, path: str, status: int = 200, **kwargs: Any) -> Any:
        response = httpx.request(method, f"{base}{path}", headers=auth, timeout=30, **kwargs)
        assert response.status_code == status, response.text
        return response.json() if response.content else None

    def chat(message: str) -> dict[str, Any]:
        with (
            httpx.Client(base_url=base, timeout=30) as client,
            client.stream("POST", "/v1/chat", json={"message": message}, headers=auth) as response,
        ):
            events = list(iter_events(response))
        return {
            "conversation_id": first(events, "start").data["conversation_id"],
            **{"sources": first(events, "sources").data},
        }

    operation = {"target": "user", "action": "add", "content": f"Note {IN_MEMORY}"}
    call("POST", "/v1/memory/operations", json={"operations": [operation]})
    chat(f"zorblax tuna {RECALLED}")
    call("PUT", "/v1/memory/settings", json={"recall_chats": True})
    turn = chat("zorblax tuna")
    assert IN_MEMORY in str(turn["sources"]["memory"])
    assert RECALLED in str(turn["sources"]["conversations"])
    stored = call("GET", f"/v1/conversations/{turn['conversation_id']}")
    assert RECALLED in str(stored["messages"][-1]["sources"])
    assert RECALLED in str(call("GET", "/v1/memory/export"))


@pytest.fixture
def run(db: Engine, sqlite_url: str, capfd: pytest.CaptureFixture[str]) -> Iterator[Captured]:
    with live_run(capfd, sqlite_url, answer, drive, subject="sources-sentinel") as captured:
        yield captured


def test_sources_and_recalled_text_never_reach_logs_or_spans(run: Captured) -> None:
    """Zero hits on every channel, while the run did produce telemetry for these turns."""
    assert run.hits(SENTINELS) == []
    events = run.events()
    for expected in ("recall.done", "turn.finished"):
        assert expected in events, expected


def test_the_same_run_without_redaction_leaks(redaction_disabled: None, run: Captured) -> None:
    """Control: with the redaction layers off, the content does show up (SQLAlchemy's DEBUG
    lines carry the stored sources), so the zero hits above come from redaction."""
    leaked = {sentinel for sentinel, _ in run.hits(SENTINELS)}
    assert RECALLED in leaked
