"""Bad input is a 4xx on every route, on every dialect, and another person's id is a 404 with no
effect: a table of every route that takes text or an id × (lone surrogate, NUL, another
person's id), through real uvicorn on SQLite, PostgreSQL and MariaDB.

- Text (a chat message, a memory entry, an import, a project name, a conversation title, the
  account confirmation, a search query, a subject): a lone surrogate or a NUL is `422` (`400` in
  OpenAI's shape on `/openai/v1`), never a `503` from a database that cannot store it.
- Ids (projects, conversations, changes, proposals, cursors), in the path, the query or the
  body: one not shaped like ours (NUL) or another person's is `404` like an unknown one.
- After the whole table, the other person's project, conversation, memory and proposal are as
  they were, and the caller's too.

A lone surrogate travels only in JSON (`"\\ud800"`): a URL cannot carry one (its bytes decode to
U+FFFD), so URL positions get NUL, which percent-encoding carries.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from app.main import create_app
from tests.support.apps import api_settings
from tests.support.databases import wipe
from tests.support.server import live_server
from tests.support.tokens import dev_auth

SURROGATE = "tea \ud800 time"
NUL = "tea \x00 time"
OPERATOR = "edge-operator"
PARSE_ERROR = -32700  # JSON-RPC's


@dataclass
class Person:
    subject: str
    project: str
    conversation: str
    change: str
    proposal: str

    @property
    def auth(self) -> dict[str, str]:
        return dev_auth(self.subject)


@dataclass
class World:
    url: str
    me: Person
    them: Person


def _send(
    client: httpx.Client,
    method: str,
    path: str,
    headers: dict[str, str],
    body: Any = None,
) -> httpx.Response:
    # json.dumps escapes a lone surrogate as `\ud800`, as any client may send it.
    content = None if body is None else json.dumps(body)
    if content is not None:
        headers = headers | {"content-type": "application/json"}
    return client.request(method, path, headers=headers, content=content)


def _person(client: httpx.Client, name: str) -> Person:
    auth = dev_auth(name)
    project = _send(client, "POST", "/v1/projects", auth, {"name": f"{name}'s project"})
    assert project.status_code == 201, project.text
    turn = _send(client, "POST", "/v1/chat", auth, {"message": "Hello there."})
    assert turn.status_code == 200, turn.text
    conversation = _send(client, "GET", "/v1/conversations", auth).json()["conversations"][0]
    fact = {"target": "user", "action": "add", "content": f"The user is called {name}."}
    added = _send(client, "POST", "/v1/memory/operations", auth, {"operations": [fact]})
    assert added.status_code == 200, added.text
    change = _send(client, "GET", "/v1/memory/history", auth).json()["changes"][0]["id"]
    imported = _send(
        client, "POST", "/v1/memory/import", auth, {"text": "The user prefers green tea."}
    )
    assert imported.status_code == 200, imported.text
    proposal = imported.json()["proposal"]["id"]
    return Person(name, project.json()["id"], conversation["id"], change, proposal)


@pytest.fixture(
    scope="module",
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ],
)
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    from tests.support.databases import migrated_engine

    db_url = str(request.getfixturevalue(f"{request.param}_url"))
    engine = migrated_engine(db_url)
    wipe(engine)
    suffix = uuid.uuid4().hex[:6]
    with (
        live_server(create_app(api_settings(db_url))) as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        yield World(url, _person(client, f"me-{suffix}"), _person(client, f"them-{suffix}"))
    engine.dispose()


def q(value: str) -> str:
    return quote(value, safe="")


# (id, method, path, body, expected status); `{me.x}` and `{them.x}` name the two people's
# objects, `{bad}` the bad value (quoted in URLs).
TEXT_IN_BODY = [
    ("chat-message", "POST", "/v1/chat", {"message": "{bad}"}, 422),
    (
        "openai-message",
        "POST",
        "/openai/v1/chat/completions",
        {"model": "offline-memory-1", "messages": [{"role": "user", "content": "{bad}"}]},
        400,
    ),
    (
        "memory-add",
        "POST",
        "/v1/memory/operations",
        {"operations": [{"target": "user", "action": "add", "content": "{bad}"}]},
        422,
    ),
    (
        "memory-replace-match",
        "POST",
        "/v1/memory/operations",
        {"operations": [{"target": "user", "action": "remove", "match": "{bad}"}]},
        422,
    ),
    ("import", "POST", "/v1/memory/import", {"text": "{bad}"}, 422),
    ("project-name", "POST", "/v1/projects", {"name": "{bad}"}, 422),
    ("project-rename", "PATCH", "/v1/projects/{me.project}", {"name": "{bad}"}, 422),
    ("conversation-title", "PATCH", "/v1/conversations/{me.conversation}", {"title": "{bad}"}, 422),
    ("memory-settings", "PUT", "/v1/memory/settings", {"save_mode": "{bad}"}, 422),
    ("account-confirm", "DELETE", "/v1/account", {"confirm": "{bad}"}, 422),
    ("dev-token", "POST", "/dev/token", {"sub": "{bad}"}, 422),
]
IDS_IN_BODY = [
    ("chat-conversation", "POST", "/v1/chat", {"message": "hi", "conversation_id": "{id}"}, 404),
    ("chat-project", "POST", "/v1/chat", {"message": "hi", "project_id": "{id}"}, 404),
    (
        "conversation-move",
        "PATCH",
        "/v1/conversations/{me.conversation}",
        {"project_id": "{id}"},
        404,
    ),
]
# Routes that take `?project_id=`.
SCOPED = [
    ("GET", "/v1/memory", None),
    ("DELETE", "/v1/memory", None),
    (
        "POST",
        "/v1/memory/operations",
        {"operations": [{"target": "user", "action": "add", "content": "The user likes jam."}]},
    ),
    ("GET", "/v1/memory/history", None),
    ("POST", "/v1/memory/history/{me.change}/undo", None),
    ("GET", "/v1/memory/export", None),
    ("GET", "/v1/memory/settings", None),
    ("PUT", "/v1/memory/settings", {"save_mode": "auto"}),
    ("GET", "/v1/memory/proposals", None),
    ("POST", "/v1/memory/proposals/{me.proposal}/accept", None),
    ("POST", "/v1/memory/proposals/{me.proposal}/reject", None),
    ("POST", "/v1/memory/import", {"text": "The user likes jam."}),
    ("GET", "/v1/conversations", None),
    ("GET", "/v1/conversations/search?q=hello", None),
]
IDS_IN_PATH = [
    ("PATCH", "/v1/projects/{id}", {"name": "Renamed"}),
    ("DELETE", "/v1/projects/{id}", None),
    ("GET", "/v1/conversations/{id}", None),
    ("PATCH", "/v1/conversations/{id}", {"title": "Renamed"}),
    ("DELETE", "/v1/conversations/{id}", None),
    ("POST", "/v1/memory/history/{change}/undo", None),
    ("POST", "/v1/memory/proposals/{proposal}/accept", None),
    ("POST", "/v1/memory/proposals/{proposal}/reject", None),
]
# NUL in a URL position that holds text or a cursor rather than an id.
NUL_IN_URL = [
    ("search-query", "GET", "/v1/conversations/search?q={bad}", 422),
    ("history-cursor", "GET", "/v1/memory/history?before={bad}", 422),
    ("openai-model", "GET", "/openai/v1/models/{bad}", 404),
    ("admin-usage-subject", "GET", "/v1/admin/usage?day=2026-12-07&subject={bad}", 422),
    ("admin-erase-subject", "DELETE", "/v1/admin/users/{bad}", 422),
    ("admin-flag-name", "PUT", "/v1/admin/flags/{bad}", 404),
]


def fill(value: Any, world: World, **extra: str) -> Any:
    """`value` with the world's ids and `extra` put in its strings."""
    if isinstance(value, dict):
        return {key: fill(item, world, **extra) for key, item in value.items()}
    if isinstance(value, list):
        return [fill(item, world, **extra) for item in value]
    if isinstance(value, str):
        if value in {f"{{{key}}}" for key in extra}:  # a whole value: kept exact (NUL included)
            return extra[value[1:-1]]
        return value.format(me=world.me, them=world.them, **extra)
    return value


def _refused(answer: httpx.Response, expected: int) -> None:
    assert answer.status_code == expected, (answer.status_code, answer.text)
    assert answer.headers["content-type"].startswith("application/json")


def _headers(world: World, path: str) -> dict[str, str]:
    return dev_auth(OPERATOR, roles=["operator"]) if "/admin/" in path else world.me.auth


BAD = [pytest.param(SURROGATE, id="lone-surrogate"), pytest.param(NUL, id="nul")]


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in TEXT_IN_BODY],
)
def test_bad_text_in_a_body_is_refused(
    world: World, bad: str, method: str, path: str, body: Any, expected: int
) -> None:
    """Invariant: a lone surrogate or NUL in any text of a JSON body is 422 (400 under
    /openai/v1), never a 5xx."""
    with httpx.Client(base_url=world.url, timeout=60) as client:
        answer = _send(client, method, fill(path, world), world.me.auth, fill(body, world, bad=bad))
    _refused(answer, expected)


@pytest.mark.parametrize("bad", [*BAD, pytest.param("them", id="other-persons-id")])
@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in IDS_IN_BODY],
)
def test_bad_or_foreign_ids_in_a_body_are_404(
    world: World, bad: str, method: str, path: str, body: Any, expected: int
) -> None:
    """Invariant: an id in a body that is not shaped like ours, or is another person's, is 404
    like an unknown one."""
    value = {"conversation_id": world.them.conversation}.get(
        next(iter(k for k in body if k.endswith("_id"))), world.them.project
    )
    bad_id = value if bad == "them" else bad
    with httpx.Client(base_url=world.url, timeout=60) as client:
        answer = _send(
            client, method, fill(path, world), world.me.auth, fill(body, world, id=bad_id)
        )
    _refused(answer, expected)


@pytest.mark.parametrize("bad", [pytest.param(NUL, id="nul"), pytest.param("them", id="other")])
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [pytest.param(*case, id=f"{case[0]} {case[1]}") for case in SCOPED],
)
def test_a_bad_or_foreign_project_scope_is_404_on_every_memory_and_conversation_route(
    world: World, bad: str, method: str, path: str, body: Any
) -> None:
    """Invariant: `?project_id=` with NUL or another person's project answers 404 on every
    route that takes it (the settings and the export included), with no effect."""
    project = world.them.project if bad == "them" else bad
    joiner = "&" if "?" in path else "?"
    target = f"{fill(path, world)}{joiner}project_id={q(project)}"
    with httpx.Client(base_url=world.url, timeout=60) as client:
        answer = _send(client, method, target, world.me.auth, fill(body, world))
    _refused(answer, 404)


@pytest.mark.parametrize("bad", [pytest.param(NUL, id="nul"), pytest.param("them", id="other")])
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [pytest.param(*case, id=f"{case[0]} {case[1]}") for case in IDS_IN_PATH],
)
def test_a_bad_or_foreign_id_in_a_path_is_404(
    world: World, bad: str, method: str, path: str, body: Any
) -> None:
    """Invariant: a path id with NUL, or another person's, is 404 with no effect."""
    them = world.them
    ids = {"id": them.project if "projects" in path else them.conversation}
    ids |= {"change": them.change, "proposal": them.proposal}
    if bad != "them":
        ids = dict.fromkeys(ids, bad)
    target = path.format(**{key: q(value) for key, value in ids.items()})
    with httpx.Client(base_url=world.url, timeout=60) as client:
        answer = _send(client, method, target, world.me.auth, body)
    _refused(answer, 404)


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in NUL_IN_URL],
)
def test_nul_in_url_text_is_refused(world: World, method: str, path: str, expected: int) -> None:
    """Invariant: NUL in a query text, a cursor, a subject or a name in the URL is a 4xx,
    never a 5xx."""
    target = path.format(bad=q(NUL))
    body = {"enabled": True} if method == "PUT" else None
    with httpx.Client(base_url=world.url, timeout=60) as client:
        answer = _send(client, method, target, _headers(world, path), body)
    _refused(answer, expected)


def test_foreign_project_headers_are_404(world: World) -> None:
    """Invariant: another person's project in `X-Project-Id` is 404 on the OpenAI route and on
    MCP, before any model or tool runs."""
    header = {"X-Project-Id": world.them.project}
    with httpx.Client(base_url=world.url, timeout=60) as client:
        completion = _send(
            client,
            "POST",
            "/openai/v1/chat/completions",
            world.me.auth | header,
            {"model": "offline-memory-1", "messages": [{"role": "user", "content": "hi"}]},
        )
        mcp = _send(
            client,
            "POST",
            "/mcp",
            world.me.auth | header | {"accept": "application/json, text/event-stream"},
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        )
    _refused(completion, 404)
    _refused(mcp, 404)


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        pytest.param(
            "memory_update",
            {"operations": [{"target": "user", "action": "add", "content": "{bad}"}]},
            id="memory_update",
        ),
        pytest.param("conversation_search", {"query": "{bad}"}, id="conversation_search"),
    ],
)
def test_bad_text_in_mcp_tool_arguments_is_a_tool_error(
    world: World, bad: str, tool: str, arguments: dict[str, Any]
) -> None:
    """Invariant: a lone surrogate or NUL in an MCP tool's arguments is the tool's error
    result with a code (as a 422 on REST), never an internal error."""
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": fill(arguments, world, bad=bad)},
    }
    headers = world.me.auth | {"accept": "application/json, text/event-stream"}
    with httpx.Client(base_url=world.url, timeout=60) as client:
        answer = _send(client, "POST", "/mcp", headers, call)
    if bad == SURROGATE:
        # The SDK's JSON-RPC parser refuses the message itself: 400 with a parse error.
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == PARSE_ERROR
        return
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["isError"] is True, result
    assert "internal" not in json.dumps(result).lower(), result


def test_nothing_of_the_other_person_changed(world: World) -> None:
    """Invariant: after the table, the other person's project, conversation, memory and
    proposal are as they were (no cross-person effect from any refused request)."""
    them = world.them
    with httpx.Client(base_url=world.url, timeout=60) as client:
        projects = _send(client, "GET", "/v1/projects", them.auth).json()["projects"]
        assert [(p["id"], p["name"]) for p in projects] == [
            (them.project, f"{them.subject}'s project")
        ]
        conversation = _send(client, "GET", f"/v1/conversations/{them.conversation}", them.auth)
        assert conversation.status_code == 200
        memory = _send(client, "GET", "/v1/memory", them.auth).json()
        assert memory["user"]["entries"] == [f"The user is called {them.subject}."]
        pending = _send(client, "GET", "/v1/memory/proposals", them.auth).json()["proposals"]
        assert [p["id"] for p in pending] == [them.proposal]
