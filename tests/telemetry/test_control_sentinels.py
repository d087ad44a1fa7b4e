"""Sentinels planted in the memory history and in proposals never reach logs or spans.

A real server (uvicorn) at LOG_LEVEL=DEBUG, with SQLAlchemy's loggers re-opened at DEBUG:
sentinels enter as memory through the API (so that the history holds them as before and after),
are read back (history, export), undone, and enter as a turn's proposal under `ask` (listed,
accepted, rejected, forgotten). Every log record, stdout/stderr and every finished span is
searched; a control run with the redaction layers off shows the same run does leak them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from app.offline.wire import ChatRequest, Text
from tests.support.scripted import Reply, memory_call
from tests.support.sse import iter_events
from tests.telemetry.capture import Captured, live_run
from tests.telemetry.test_sentinels import redaction_disabled

HISTORY_ADDED = "SNTL-H1A-history-added-WALRUS-12"
HISTORY_REPLACED = "SNTL-H2R-history-replaced-PUFFIN-34"
PROPOSED_ACCEPTED = "SNTL-P1A-proposal-accepted-BADGER-56"
PROPOSED_REJECTED = "SNTL-P2R-proposal-rejected-OTTER-78"
SENTINELS = [HISTORY_ADDED, HISTORY_REPLACED, PROPOSED_ACCEPTED, PROPOSED_REJECTED]

__all__ = ["redaction_disabled"]  # a fixture this module uses


async def propose_marked(request: ChatRequest) -> Reply:
    """Stages the sentinel the user message names, then answers."""
    if request.messages and request.messages[-1].get("role") == "tool":
        return Text("I can remember that once you accept.")
    text = str(request.messages[-1].get("content")) if request.messages else ""
    sentinel = next((s for s in SENTINELS if s in text), "nothing")
    return memory_call({"target": "memory", "action": "add", "content": f"Note {sentinel}"})


def drive(base: str, auth: dict[str, str]) -> None:
    def call(method: str, path: str, status: int = 200, **kwargs: Any) -> Any:
        response = httpx.request(method, f"{base}{path}", headers=auth, timeout=30, **kwargs)
        assert response.status_code == status, response.text
        return response.json() if response.content else None

    def chat(message: str) -> list[str]:
        with (
            httpx.Client(base_url=base, timeout=30) as client,
            client.stream("POST", "/v1/chat", json={"message": message}, headers=auth) as response,
        ):
            return [e.data.get("outcome") for e in iter_events(response) if e.event == "memory"]

    call(
        "POST",
        "/v1/memory/operations",
        json={"operations": [{"target": "user", "action": "add", "content": HISTORY_ADDED}]},
    )
    call(
        "POST",
        "/v1/memory/operations",
        json={
            "operations": [
                {
                    "target": "user",
                    "action": "replace",
                    "match": HISTORY_ADDED,
                    "content": HISTORY_REPLACED,
                }
            ]
        },
    )
    history = call("GET", "/v1/memory/history")["changes"]
    assert history[0]["operations"][0]["after"] == HISTORY_REPLACED
    call("POST", f"/v1/memory/history/{history[0]['id']}/undo")
    assert HISTORY_REPLACED in str(call("GET", "/v1/memory/export"))

    call("PUT", "/v1/memory/settings", json={"save_mode": "ask"})
    assert chat(f"remember {PROPOSED_ACCEPTED}") == ["proposed"]
    assert chat(f"remember {PROPOSED_REJECTED}") == ["proposed"]
    pending = call("GET", "/v1/memory/proposals")["proposals"]
    by_content = {p["operations"][0]["content"]: p["id"] for p in pending}
    call("POST", f"/v1/memory/proposals/{by_content[f'Note {PROPOSED_ACCEPTED}']}/accept")
    call("POST", f"/v1/memory/proposals/{by_content[f'Note {PROPOSED_REJECTED}']}/reject", 204)
    assert PROPOSED_ACCEPTED in str(call("GET", "/v1/memory/export"))
    call("DELETE", "/v1/memory", 204)


@pytest.fixture
def run(db: Engine, sqlite_url: str, capfd: pytest.CaptureFixture[str]) -> Iterator[Captured]:
    with live_run(capfd, sqlite_url, propose_marked, drive, subject="control-sentinel") as captured:
        yield captured


def test_history_and_proposal_content_never_reaches_logs_or_spans(run: Captured) -> None:
    """Zero hits on every channel, while the run did produce telemetry for these routes."""
    assert run.hits(SENTINELS) == []
    events = run.events()
    for expected in ("memory.control_committed", "memory.exported", "memory.proposal_rejected"):
        assert expected in events, expected
    assert any("/v1/memory/history" in name for name in run.span_names())


def test_the_same_run_without_redaction_leaks(redaction_disabled: None, run: Captured) -> None:
    """Control: with the redaction layers off, history and proposal content does show up, so
    the zero hits above come from redaction, not from a harness that sees nothing."""
    leaked = {sentinel for sentinel, _ in run.hits(SENTINELS)}
    assert {HISTORY_REPLACED, PROPOSED_ACCEPTED} <= leaked
