"""Projects on the OpenAI-compatible route and the MCP server, on SQLite, PostgreSQL and
MariaDB.

Invariants: `/openai/v1` runs a turn in the project named by `X-Project-Id` or by the model id
`<model>/project/<id>` (the models list offers one such id per project of the caller); both
given and different is 400, another person's or an unknown project 404, in OpenAI's shape; the
model's bytes carry that project's document only. `/mcp` with `X-Project-Id` shows and edits
that project's scope only; another person's project is 404 before the protocol is reached.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import openai
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, Implementation
from sqlalchemy import Engine

from app.memory.projects import Scope
from app.memory.rules import GENERAL_TARGETS, TARGETS, Operation
from app.memory.service import MemoryService
from tests.support.apps import api_settings
from tests.support.openai_sdk import MODEL, sdk, user_says
from tests.support.scripted import ScriptedModel, Text, memory_call, serve_with_model
from tests.support.tokens import dev_auth

SECRET_A = "Client A ships on Tuesdays."
SECRET_B = "Client B's staging host is called nimbus."
GENERAL_NOTE = "General: the user's laptop runs Fedora."


def plant(engine: Engine) -> tuple[str, str]:
    """Alice's projects A and B with a document each, and a general note."""
    service = MemoryService(engine)
    a = service.create_project("alice", "A").id
    b = service.create_project("alice", "B").id
    service.commit_operations(
        "alice", [[Operation("project", "add", content=SECRET_A)]], scope=Scope(a)
    )
    service.commit_operations(
        "alice", [[Operation("project", "add", content=SECRET_B)]], scope=Scope(b)
    )
    service.commit_operations("alice", [[Operation("memory", "add", content=GENERAL_NOTE)]])
    return a, b


def sent(model: ScriptedModel) -> str:
    """Every request the service sent the model, but the model's own messages."""
    return json.dumps(
        [
            [m for m in request.messages if m.get("role") != "assistant"]
            for request in model.requests
        ]
    )


def test_openai_route_runs_in_the_named_project(engine: Engine, db_url: str) -> None:
    a, b = plant(engine)
    edit = {"target": "project", "action": "add", "content": "A prefers email."}
    model = ScriptedModel([Text("Hi."), memory_call(edit), Text("Saved.")])
    with serve_with_model(api_settings(db_url), model) as url, sdk(url, "alice") as client:
        listed = [card.id for card in client.models.list()]
        assert listed == [MODEL, f"{MODEL}/project/{a}", f"{MODEL}/project/{b}"]
        assert client.models.retrieve(f"{MODEL}/project/{a}").id == f"{MODEL}/project/{a}"
        client.chat.completions.create(model=f"{MODEL}/project/{a}", messages=user_says("Hi"))
        client.chat.completions.create(
            model=MODEL, messages=user_says("Remember it"), extra_headers={"X-Project-Id": a}
        )
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(
                model=f"{MODEL}/project/{a}",
                messages=user_says("Hi"),
                extra_headers={"X-Project-Id": b},
            )
    bytes_sent = sent(model)
    assert SECRET_A in bytes_sent
    assert SECRET_B not in bytes_sent and GENERAL_NOTE not in bytes_sent
    service = MemoryService(engine)
    assert service.read_scoped("alice", Scope(a)).project == (SECRET_A, "A prefers email.")
    assert service.read_scoped("alice", Scope(b)).project == (SECRET_B,)
    model.assert_done()


def test_openai_route_refuses_another_persons_project(engine: Engine, db_url: str) -> None:
    a, _b = plant(engine)
    model = ScriptedModel([])
    with serve_with_model(api_settings(db_url), model) as url, sdk(url, "mallory") as client:
        assert [card.id for card in client.models.list()] == [MODEL]
        for attempt in (
            {"model": f"{MODEL}/project/{a}"},
            {"model": MODEL, "extra_headers": {"X-Project-Id": a}},
            {"model": MODEL, "extra_headers": {"X-Project-Id": "not-an-id"}},
        ):
            with pytest.raises(openai.NotFoundError):
                client.chat.completions.create(messages=user_says("Hi"), **attempt)
        with pytest.raises(openai.NotFoundError):
            client.models.retrieve(f"{MODEL}/project/{a}")
    assert model.calls == 0


# -- MCP -------------------------------------------------------------------------------------


@asynccontextmanager
async def connect(base: str, user: str, project: str | None) -> AsyncIterator[Client]:
    headers = dev_auth(user) | ({"X-Project-Id": project} if project else {})
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(
            streamable_http_client(f"{base}/mcp", http_client=http),
            client_info=Implementation(name="Test Desktop", version="1.0"),
        ) as client,
    ):
        yield client


def body(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None
    return dict(result.structured_content)


def add(target: str, content: str) -> dict[str, Any]:
    return {"operations": [{"target": target, "action": "add", "content": content}]}


@pytest.fixture
def base(engine: Engine, db_url: str) -> Iterator[str]:
    with serve_with_model(api_settings(db_url), ScriptedModel([])) as url:
        yield url


async def test_mcp_is_scoped_by_its_project_header(engine: Engine, base: str) -> None:
    a, b = plant(engine)
    async with connect(base, "alice", a) as client:
        view = body(await client.call_tool("memory_view", {}))
        written = body(await client.call_tool("memory_update", add("project", "A uses Rust.")))
        general = await client.call_tool("memory_update", add("memory", "Not opted in."))
        extra = await client.call_tool(
            "memory_update",
            {
                "operations": [
                    {"target": "project", "action": "add", "content": "x", "project_id": b}
                ]
            },
        )
    assert set(view) >= {"user", "project", "scope"} and "memory" not in view
    assert view["project"]["entries"] == [SECRET_A]
    assert SECRET_B not in json.dumps(view) and GENERAL_NOTE not in json.dumps(view)
    assert written["status"] == "committed"
    assert general.is_error and body(general)["error"]["code"] == "invalid_operation"
    assert extra.is_error
    async with connect(base, "alice", None) as client:
        outside = body(await client.call_tool("memory_view", {}))
        refused = await client.call_tool("memory_update", add("project", "No project."))
    assert "project" not in outside and outside["memory"]["entries"] == [GENERAL_NOTE]
    assert refused.is_error
    service = MemoryService(engine)
    assert service.read_scoped("alice", Scope(a)).project == (SECRET_A, "A uses Rust.")
    assert service.read_scoped("alice", Scope(b)).project == (SECRET_B,)
    assert service.read("alice").memory == (GENERAL_NOTE,)


async def test_mcp_publishes_the_targets_of_its_scope(engine: Engine, base: str) -> None:
    """memory_update's `target` enum is what the scope's rules let the model reach: `user` and
    `memory` outside projects (the chat tool's); `user` and `project` in a project, with
    `memory` only while the project is opted into it, following the setting as it changes."""
    a, _b = plant(engine)
    service = MemoryService(engine)

    async def enum(project: str | None) -> list[str]:
        async with connect(base, "alice", project) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        operations = tools["memory_update"].input_schema["properties"]["operations"]
        return list(operations["items"]["properties"]["target"]["enum"])

    assert await enum(None) == list(GENERAL_TARGETS)
    assert await enum(a) == ["user", "project"]
    service.change_project("alice", a, general_memory=True)
    assert await enum(a) == list(TARGETS)
    service.change_project("alice", a, general_memory=False)
    assert await enum(a) == ["user", "project"]


async def test_mcp_refuses_another_persons_project(engine: Engine, base: str) -> None:
    a, _b = plant(engine)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        response = await http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={
                **dev_auth("mallory"),
                "X-Project-Id": a,
                "Accept": "application/json, text/event-stream",
            },
        )
    assert response.status_code == 404
    assert SECRET_A not in response.text
