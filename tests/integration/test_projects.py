"""Projects in the memory service on SQLite, PostgreSQL and MariaDB.

Invariants: a project's document is reachable only in its own scope (another project of the same
person, the general scope and another person never read or write it); history, undo, proposals
and reject are scoped the same way; PROJECTS_MAX is counted under the writer lock; deleting a
project removes its document, history and proposals and deletes or detaches its conversations;
forgetting keeps the projects and drops their documents; erasure removes projects too.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from sqlalchemy import Engine, Table, func, select

from app.conversations import repository as transcripts
from app.conversations.service import ConversationService
from app.db.schema import conversations, memory_changes, project_memory, projects
from app.memory import history, proposals, writes
from app.memory.history import now
from app.memory.projects import (
    ProjectLimitError,
    ProjectNotEmptyError,
    ProjectNotFoundError,
    Scope,
)
from app.memory.provenance import Provenance
from app.memory.rules import MemoryValidationError, Operation
from app.memory.service import MemoryService
from app.memory.unit_of_work import unit_of_work
from app.memory.writes import MemoryNotFoundError, WriteLimits
from tests.support.databases import lock_waiters, wipe
from tests.support.waiting import wait_for

TURN = "00000000-0000-4000-8000-000000000001"


@pytest.fixture
def service(engine: Engine) -> MemoryService:
    wipe(engine)
    return MemoryService(engine, limits=WriteLimits(projects=3, project_chars=300))


def add(target: str, content: str) -> list[list[Operation]]:
    return [[Operation(target, "add", content=content)]]  # type: ignore[arg-type]


def rows(engine: Engine, table: Table, **where: str) -> int:
    query = select(func.count()).select_from(table)
    for name, value in where.items():
        query = query.where(table.c[name] == value)
    with engine.connect() as connection:
        return int(connection.execute(query).scalar_one())


def test_a_project_document_stays_in_its_project(service: MemoryService) -> None:
    """Writes in project A land in A's document only; project B, the general scope and another
    person read nothing of it; a project scope reads the shared user profile."""
    a = service.create_project("alice", "Client A")
    b = service.create_project("alice", "Client B")
    service.commit_operations("alice", add("user", "Name: Alice."))
    service.commit_operations("alice", add("memory", "General note."))
    service.commit_operations("alice", add("project", "A bills monthly."), scope=Scope(a.id))
    in_a = service.read_scoped("alice", Scope(a.id, owner=False))
    assert in_a.project == ("A bills monthly.",) and in_a.user == ("Name: Alice.",)
    assert in_a.memory == ()  # not opted into the general document
    assert service.read_scoped("alice", Scope(b.id, owner=False)).project == ()
    general = service.read("alice")
    assert general.project == () and "project" not in general.targets
    with pytest.raises(ProjectNotFoundError):
        service.read_scoped("mallory", Scope(a.id))
    with pytest.raises(ProjectNotFoundError):
        service.commit_operations("mallory", add("project", "Injected."), scope=Scope(a.id))
    with pytest.raises(MemoryValidationError):
        service.commit_operations("alice", add("project", "No project here."))
    with pytest.raises(MemoryValidationError):
        service.commit_operations(
            "alice", add("memory", "Not opted in."), scope=Scope(a.id, owner=False)
        )
    assert service.read_scoped("alice", Scope(a.id)).project == ("A bills monthly.",)


def test_the_model_reaches_general_memory_only_in_an_opted_in_project(
    service: MemoryService,
) -> None:
    """general_memory on: the model's scope reads and writes the general document too."""
    project = service.create_project("alice", "Personal", general_memory=True)
    service.commit_operations("alice", add("memory", "General note."))
    scope = Scope(project.id, owner=False)
    assert service.read_scoped("alice", scope).memory == ("General note.",)
    service.commit_operations("alice", add("memory", "Learned in the project."), scope=scope)
    assert service.read("alice").memory == ("General note.", "Learned in the project.")
    service.change_project("alice", project.id, general_memory=False)
    assert service.read_scoped("alice", scope).memory == ()


def test_history_undo_and_proposals_are_scoped(service: MemoryService, engine: Engine) -> None:
    """A change made in project A is in A's history only, undone only in A's scope; a
    proposal staged in A is accepted or rejected only in A's scope."""
    a = service.create_project("alice", "Client A")
    b = service.create_project("alice", "Client B")
    done = service.commit_operations("alice", add("project", "A fact."), scope=Scope(a.id))
    with engine.connect() as connection:
        assert [
            e.id for e in history.page(connection, "alice", limit=10, project_id=a.id) or []
        ] == [done.change_id]
        assert history.page(connection, "alice", limit=10, project_id=None) == []
        assert history.page(connection, "alice", limit=10, project_id=b.id) == []
    for wrong in (Scope(), Scope(b.id)):
        with pytest.raises(MemoryNotFoundError):
            service.commit_operations(
                "alice", [], provenance=Provenance("undo", undoes=done.change_id), scope=wrong
            )
    service.commit_operations(
        "alice", [], provenance=Provenance("undo", undoes=done.change_id), scope=Scope(a.id)
    )
    assert service.read_scoped("alice", Scope(a.id)).project == ()

    service.set_save_mode("alice", "ask")
    staged = service.commit_operations(
        "alice",
        add("project", "Proposed in A."),
        provenance=Provenance("turn"),
        may_propose=True,
        scope=Scope(a.id, owner=False),
    )
    assert staged.proposal_id is not None
    with engine.connect() as connection:
        assert proposals.pending(connection, "alice", project_id=None) == []
        assert [p.id for p in proposals.pending(connection, "alice", project_id=a.id)] == [
            staged.proposal_id
        ]
    assert not service.reject("alice", staged.proposal_id, Scope(b.id))
    assert not service.reject("alice", staged.proposal_id)
    with pytest.raises(MemoryNotFoundError):
        service.commit_operations(
            "alice", [], provenance=Provenance("proposal"), proposal_id=staged.proposal_id
        )
    service.commit_operations(
        "alice",
        [],
        provenance=Provenance("proposal"),
        proposal_id=staged.proposal_id,
        scope=Scope(a.id),
    )
    assert service.read_scoped("alice", Scope(a.id)).project == ("Proposed in A.",)


def test_the_project_bound_and_the_project_limit(service: MemoryService) -> None:
    """PROJECT_MEMORY_CHARS bounds the project document; PROJECTS_MAX the projects."""
    project = service.create_project("alice", "One")
    with pytest.raises(MemoryValidationError) as raised:
        service.commit_operations("alice", add("project", "x" * 301), scope=Scope(project.id))
    assert raised.value.code == "capacity_exceeded"
    service.create_project("alice", "Two")
    service.create_project("alice", "Three")
    with pytest.raises(ProjectLimitError):
        service.create_project("alice", "Four")
    service.create_project("bob", "Bob's first")  # the limit is per person


def test_deleting_a_project(service: MemoryService, engine: Engine) -> None:
    """Without a choice a project with conversations is not deleted (ProjectNotEmptyError);
    `detach` keeps them as general conversations, `delete` removes them; the document, history
    and proposals go either way, and nothing of another project."""
    kept = service.create_project("alice", "Kept")
    for choice in ("detach", "delete"):
        project = service.create_project("alice", f"Goes ({choice})")
        service.commit_operations("alice", add("project", "Doomed."), scope=Scope(project.id))
        service.commit_operations("alice", add("project", "Stays."), scope=Scope(kept.id))
        conversation = f"00000000-0000-4000-8000-00000000000{'1' if choice == 'detach' else '2'}"
        with engine.begin() as connection:
            transcripts.create(connection, conversation, "alice", "Chat", project_id=project.id)
        with pytest.raises(ProjectNotEmptyError) as raised:
            service.delete_project("alice", project.id, None)
        assert raised.value.conversations == 1
        assert service.delete_project("alice", project.id, choice) == 1
        assert rows(engine, projects, id=project.id) == 0
        assert rows(engine, project_memory, project_id=project.id) == 0
        assert rows(engine, memory_changes, project_id=project.id) == 0
        left = rows(engine, conversations, id=conversation)
        assert left == (1 if choice == "detach" else 0)
        if choice == "detach":
            with engine.connect() as connection:
                moved = transcripts.get(connection, "alice", conversation)
            assert moved is not None and moved.project_id is None
    assert service.read_scoped("alice", Scope(kept.id)).project == ("Stays.",)
    empty = service.create_project("alice", "Empty")
    assert service.delete_project("alice", empty.id, None) == 0
    with pytest.raises(ProjectNotFoundError):
        service.delete_project("bob", kept.id, "delete")


def test_forget_keeps_projects_and_erase_removes_them(
    service: MemoryService, engine: Engine
) -> None:
    """Forgetting memory drops project documents and keeps the projects; erasure drops both."""
    project = service.create_project("alice", "Client A")
    service.commit_operations("alice", add("project", "A fact."), scope=Scope(project.id))
    service.forget("alice")
    assert rows(engine, projects, user_id="alice") == 1
    assert rows(engine, project_memory, user_id="alice") == 0
    service.commit_operations("alice", add("project", "Again."), scope=Scope(project.id))
    service.erase("alice", now())
    assert rows(engine, projects, user_id="alice") == 0
    assert rows(engine, project_memory, user_id="alice") == 0


def test_a_conversation_never_starts_in_a_project_being_deleted(
    service: MemoryService, engine: Engine
) -> None:
    """A project's deletion takes its row for update inside the writer's unit of work; a turn's
    new conversation in that project, started meanwhile, waits for it (seen blocked on the
    servers; SQLite's one write lock makes it wait there), then finds the project gone and is
    not written (the turn runs without a transcript). No conversation ever points at a project
    that is gone."""
    project = service.create_project("alice", "Client A")
    starting: list[str | None] = []
    with unit_of_work(engine, "alice", "project") as unit:
        assert writes.delete_project(unit, project.id, "detach") == 0
        creation = threading.Thread(
            target=lambda: starting.append(
                asyncio.run(ConversationService(engine).create("alice", TURN, "Hi.", project.id))
            )
        )
        creation.start()
        if engine.dialect.name != "sqlite":
            wait_for(lambda: lock_waiters(engine, "%amem_projects%") >= 1, "the creation waiting")
    creation.join(30)
    assert starting == [None]
    assert rows(engine, conversations, project_id=project.id) == 0
    assert rows(engine, projects, id=project.id) == 0


def test_a_conversation_started_before_the_deletion_is_counted_by_it(
    service: MemoryService, engine: Engine
) -> None:
    """The other order: a conversation written in the project before its deletion is counted
    (`409` without a choice) and then detached with it."""
    project = service.create_project("alice", "Client A")
    started = asyncio.run(ConversationService(engine).create("alice", TURN, "Hi.", project.id))
    assert started is not None
    with pytest.raises(ProjectNotEmptyError):
        service.delete_project("alice", project.id, None)
    assert service.delete_project("alice", project.id, "detach") == 1
    assert rows(engine, conversations, id=started) == 1
    assert rows(engine, conversations, project_id=project.id) == 0
