"""Sentinels sent through the MCP tools and the import never reach logs or spans.

A real server (uvicorn) at LOG_LEVEL=DEBUG: sentinels enter through memory_update (saved, and
refused), are read back with memory_view, searched for with conversation_search, and pasted into
an import (a clean line, a secret line) whose proposal is accepted. Every log record,
stdout/stderr and every finished span is searched; a control run with the redaction layers off
shows the same run does leak them.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import Engine

from app.main import create_app
from tests.support.apps import api_settings
from tests.support.server import live_server
from tests.support.tokens import dev_token
from tests.telemetry.capture import Captured, capture_telemetry
from tests.telemetry.test_sentinels import redaction_disabled

SAVED = "SNTL-M1S-mcp-saved-HERON-91"
REFUSED = "SNTL-M2R-mcp-refused-IBIS-92"
QUERY = "SNTLQUERYKESTREL93"
IMPORTED = "SNTL-I1A-import-kept-LYNX-94"
IMPORTED_SECRET = "SNTL-I2S-import-secret-MOLE-95"
SENTINELS = [SAVED, REFUSED, QUERY, IMPORTED, IMPORTED_SECRET]

__all__ = ["redaction_disabled"]  # a fixture this module uses


async def drive_mcp(base: str, auth: dict[str, str]) -> None:
    async with (
        httpx2.AsyncClient(headers=auth) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
    ):
        saved = await client.call_tool(
            "memory_update",
            {"operations": [{"target": "user", "action": "add", "content": f"Likes {SAVED}"}]},
        )
        assert not saved.is_error
        refused = await client.call_tool(
            "memory_update",
            {"operations": [{"target": "user", "action": "remove", "match": REFUSED}]},
        )
        assert refused.is_error
        view = await client.call_tool("memory_view", {})
        assert SAVED in str(view.structured_content)
        await client.call_tool("conversation_search", {"query": QUERY})


def drive(base: str, auth: dict[str, str]) -> None:
    asyncio.run(drive_mcp(base, auth))
    paste = f"- Keeps {IMPORTED}\n- Token ghp_{'a1B2c3D4e5' * 3}abcdef {IMPORTED_SECRET}"
    response = httpx.post(f"{base}/v1/memory/import", json={"text": paste}, headers=auth)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert [item["reason"] for item in body["dropped"]] == ["secret"]
    accepted = httpx.post(
        f"{base}/v1/memory/proposals/{body['proposal']['id']}/accept", headers=auth
    )
    assert IMPORTED in accepted.text


@pytest.fixture
def run(db: Engine, sqlite_url: str, capfd: pytest.CaptureFixture[str]) -> Iterator[Captured]:
    settings = api_settings(sqlite_url, log_level="DEBUG", log_format="json")
    token = dev_token(f"mcp-sentinel-{uuid.uuid4().hex[:8]}")
    with capture_telemetry(capfd) as captured:
        with live_server(create_app(settings)) as base:
            drive(base, {"Authorization": f"Bearer {token}"})
        yield captured


def test_mcp_and_import_content_never_reaches_logs_or_spans(run: Captured) -> None:
    """Zero hits on every channel, while the run did log these tools and the import."""
    assert run.hits(SENTINELS) == []
    events = run.events()
    for expected in ("mcp.update", "mcp.update_rejected", "mcp.search", "memory.import_proposed"):
        assert expected in events, expected


def test_the_same_run_without_redaction_leaks(redaction_disabled: None, run: Captured) -> None:
    """Control: with the redaction layers off, the MCP SDK's own debug records (of the client in
    this process; the server's are held back the same way) carry the tool arguments, so the
    zero hits above come from redaction, not from a harness that sees nothing."""
    leaked = {sentinel for sentinel, _ in run.hits(SENTINELS)}
    assert {SAVED, REFUSED, QUERY} <= leaked
