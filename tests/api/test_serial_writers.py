"""Every pair of writers of one user's memory state is serial, through the real service on every
dialect: writer A is held inside its unit of work with the user's lock taken, writer B is sent
meanwhile and seen waiting for that lock, then A is let go. Each response and the end state
(memory, history, proposals, save mode, projects and the seeded conversation's project) must
be those of the serial order A then B, which an oracle user gets by sending the same two
requests one after the other. A conversation's move into a project is a writer too: serial
with the project's deletion, it never leaves the conversation in a project that is gone.

Without the lock (the mutation: `holding_writer_lock` not acquiring on PostgreSQL and MariaDB)
B runs beside A, and `forget`/`accept`, `accept`/`reject` and `undo`/`undo` end in states no
serial order gives. SQLite's lock is its one write lock (BEGIN IMMEDIATE): B cannot pass A there
whatever the test observes.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from app.main import create_app
from app.runtime import Runtime
from tests.support.apps import api_settings
from tests.support.databases import lock_waiters
from tests.support.server import live_server
from tests.support.sse import first, iter_events
from tests.support.tokens import dev_auth
from tests.support.waiting import wait_for

WAIT_SECONDS = 30


@dataclass(frozen=True)
class Seeded:
    """What the setup left for a user: a recorded change, a pending proposal, a project and a
    conversation outside it."""

    change_id: str
    proposal_id: str
    project_id: str
    conversation_id: str


def _ok(response: httpx.Response) -> httpx.Response:
    assert response.status_code < 300, (response.status_code, response.text)
    return response


def seed(client: httpx.Client, user: str) -> Seeded:
    """A `user` entry (its change is the one undone), then under `ask` a turn's proposal, then
    back to `auto`."""
    headers = dev_auth(user)
    _ok(
        client.post(
            "/v1/memory/operations",
            headers=headers,
            json={"operations": [{"target": "user", "action": "add", "content": "Likes tea."}]},
        )
    )
    change_id = _ok(client.get("/v1/memory/history", headers=headers)).json()["changes"][0]["id"]
    _ok(client.put("/v1/memory/settings", headers=headers, json={"save_mode": "ask"}))
    turn(client, user, "remember that the user keeps bees")
    [proposal] = _ok(client.get("/v1/memory/proposals", headers=headers)).json()["proposals"]
    _ok(client.put("/v1/memory/settings", headers=headers, json={"save_mode": "auto"}))
    project = _ok(client.post("/v1/projects", headers=headers, json={"name": "Client A"})).json()
    [conversation] = _ok(client.get("/v1/conversations", headers=headers)).json()["conversations"]
    return Seeded(change_id, proposal["id"], project["id"], conversation["id"])


def turn(client: httpx.Client, user: str, message: str) -> str:
    """A chat turn; its `memory` event's outcome."""
    with client.stream(
        "POST", "/v1/chat", json={"message": message}, headers=dev_auth(user)
    ) as response:
        assert response.status_code == 200, response.read()
        events = list(iter_events(response))
    return str(first(events, "memory").data["outcome"])


# A writer: what the service names it when it takes the lock, and the request that makes it.
Request = Callable[[httpx.Client, str, Seeded], object]


def _status(response: httpx.Response) -> int:
    return response.status_code


WRITERS: dict[str, tuple[str, Request]] = {
    "batch": (
        "api",
        lambda c, u, s: _status(
            c.post(
                "/v1/memory/operations",
                headers=dev_auth(u),
                json={
                    "operations": [
                        {"target": "memory", "action": "add", "content": "Uses PostgreSQL."},
                        {"target": "user", "action": "replace", "match": "tea", "content": "Tea."},
                    ]
                },
            )
        ),
    ),
    "turn": ("turn", lambda c, u, s: turn(c, u, "remember that the user rides a bike")),
    "forget": ("forget", lambda c, u, s: _status(c.delete("/v1/memory", headers=dev_auth(u)))),
    "accept": (
        "proposal",
        lambda c, u, s: _status(
            c.post(f"/v1/memory/proposals/{s.proposal_id}/accept", headers=dev_auth(u))
        ),
    ),
    "reject": (
        "reject",
        lambda c, u, s: _status(
            c.post(f"/v1/memory/proposals/{s.proposal_id}/reject", headers=dev_auth(u))
        ),
    ),
    "undo": (
        "undo",
        lambda c, u, s: _status(
            c.post(f"/v1/memory/history/{s.change_id}/undo", headers=dev_auth(u))
        ),
    ),
    "move": (
        "project",
        lambda c, u, s: _status(
            c.patch(
                f"/v1/conversations/{s.conversation_id}",
                headers=dev_auth(u),
                json={"project_id": s.project_id},
            )
        ),
    ),
    "drop_project": (
        "project",
        lambda c, u, s: _status(
            c.delete(f"/v1/projects/{s.project_id}?conversations=detach", headers=dev_auth(u))
        ),
    ),
    "ask": (
        "save_mode",
        lambda c, u, s: _status(
            c.put("/v1/memory/settings", headers=dev_auth(u), json={"save_mode": "ask"})
        ),
    ),
}

PAIRS = [
    ("forget", "batch"),
    ("batch", "forget"),
    ("forget", "turn"),
    ("turn", "forget"),
    ("accept", "reject"),
    ("reject", "accept"),
    ("accept", "accept"),
    ("undo", "undo"),
    ("undo", "batch"),
    ("batch", "undo"),
    ("forget", "accept"),
    ("accept", "forget"),
    ("forget", "undo"),
    ("ask", "turn"),
    ("turn", "ask"),
    ("drop_project", "move"),
    ("move", "drop_project"),
]


def state(client: httpx.Client, user: str, seeded: Seeded) -> dict[str, Any]:
    """Everything a writer can change, without ids and times (they differ between users). Of
    the conversations, the seeded one's project: a turn's own conversation may be missing on
    SQLite, whose one write lock the held writer keeps from the turn's transcript write."""
    headers = dev_auth(user)
    memory = _ok(client.get("/v1/memory", headers=headers)).json()
    history = _ok(client.get("/v1/memory/history", headers=headers)).json()["changes"]
    pending = _ok(client.get("/v1/memory/proposals", headers=headers)).json()["proposals"]
    mode = _ok(client.get("/v1/memory/settings", headers=headers)).json()["save_mode"]
    projects = {
        project["id"]: project["name"]
        for project in _ok(client.get("/v1/projects", headers=headers)).json()["projects"]
    }
    conversations = _ok(client.get("/v1/conversations", headers=headers)).json()["conversations"]
    return {
        "user": memory["user"]["entries"],
        "memory": memory["memory"]["entries"],
        "history": [(change["source"], change["operations"]) for change in history],
        "proposals": [proposal["operations"] for proposal in pending],
        "save_mode": mode,
        "projects": sorted(projects.values()),
        # The seeded conversation's project by name, or `gone` if it names one that is no more.
        "conversation_in": [
            None if c["project_id"] is None else projects.get(c["project_id"], "gone")
            for c in conversations
            if c["id"] == seeded.conversation_id
        ],
    }


class Holder:
    """MemoryService.observe: holds the first writer of `user` named `what` inside its unit of
    work, lock taken, until released."""

    def __init__(self, user: str, what: str) -> None:
        self.user, self.what = user, what
        self.reached, self.release = threading.Event(), threading.Event()
        self._taken = False
        self._lock = threading.Lock()

    def __call__(self, user: str, what: str) -> None:
        with self._lock:
            mine = user == self.user and what == self.what and not self._taken
            self._taken = self._taken or mine
        if mine:
            self.reached.set()
            assert self.release.wait(WAIT_SECONDS), "the held writer was never released"


class InThread:
    """One request in a thread; `result()` joins it and re-raises its failure."""

    def __init__(self, work: Callable[[], object]) -> None:
        self._outcome: list[object] = []
        self._error: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(work,), daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], object]) -> None:
        try:
            self._outcome.append(work())
        except BaseException as error:
            self._error.append(error)

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self) -> object:
        self._thread.join(WAIT_SECONDS)
        assert not self._thread.is_alive(), "the request never finished"
        if self._error:
            raise self._error[0]
        return self._outcome[0]


@pytest.fixture(scope="module")
def services() -> Iterator[Callable[[str], tuple[str, Runtime]]]:
    """One live service per database for the module's cases (each case has its own users),
    started when a case first needs it."""
    started: dict[str, tuple[str, Runtime]] = {}
    with ExitStack() as stack:

        def service(db_url: str) -> tuple[str, Runtime]:
            if db_url not in started:
                # Quiet: the service outlives each case, and a request line logged after a
                # case's output capture ended would reach the terminal.
                app = create_app(api_settings(db_url, log_level="WARNING"))
                started[db_url] = (stack.enter_context(live_server(app)), app.state.runtime)
            return started[db_url]

        yield service


@pytest.mark.parametrize(("first_writer", "second_writer"), PAIRS, ids=["-".join(p) for p in PAIRS])
def test_two_writers_of_one_user_end_as_one_serial_order(
    engine: Engine,
    db_url: str,
    services: Callable[[str], tuple[str, Runtime]],
    first_writer: str,
    second_writer: str,
) -> None:
    """A holds the user's lock; B, sent meanwhile, waits for it (seen blocked on the servers);
    once A is let go both answer, and responses and state equal A-then-B run serially."""
    a_name, a_request = WRITERS[first_writer]
    b_name, b_request = WRITERS[second_writer]
    url, runtime = services(db_url)
    with httpx.Client(base_url=url, timeout=60) as client:
        oracle = f"oracle-{uuid.uuid4().hex[:8]}"
        oracle_seed = seed(client, oracle)
        expected = (
            a_request(client, oracle, oracle_seed),
            b_request(client, oracle, oracle_seed),
            state(client, oracle, oracle_seed),
        )

        user = f"racer-{uuid.uuid4().hex[:8]}"
        seeded = seed(client, user)
        holder = Holder(user, a_name)
        waiting = threading.Event()

        def observe(owner: str, what: str) -> None:
            holder(owner, what)

        def announce(owner: str, what: str) -> None:
            if owner == user and what == b_name and holder.reached.is_set():
                waiting.set()

        runtime.memory.observe = observe
        runtime.memory.before_lock = announce
        try:
            first = InThread(lambda: a_request(client, user, seeded))
            assert holder.reached.wait(WAIT_SECONDS), f"{first_writer} never took the lock"
            second = InThread(lambda: b_request(client, user, seeded))
            assert waiting.wait(WAIT_SECONDS), f"{second_writer} never reached the lock"
            if engine.dialect.name != "sqlite":
                # Blocked on the writer lock; under the mutation (no lock) it either finished
                # or is blocked on one of A's row locks: any wait of this database counts.
                wait_for(
                    lambda: second.done or lock_waiters(engine, "%") >= 1,
                    f"{second_writer} waiting for {first_writer}",
                )
            holder.release.set()
            got = (first.result(), second.result(), state(client, user, seeded))
        finally:
            holder.release.set()
            runtime.memory.observe = None
            runtime.memory.before_lock = None
    assert got == expected
