"""History, undo and proposals on the write path itself, on SQLite, PostgreSQL and MariaDB: a
change and its history row commit in one transaction (a real driver fault between them leaves
neither), history is bounded per user, an undo is pinned to what the change produced, ask mode
turns a batch into a proposal that accepting applies like a staged batch, and forgetting
removes history and proposals but keeps the save mode."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import DBAPIError

from app.db.schema import memory_changes, memory_proposals
from app.memory import history, proposals
from app.memory.projects import GENERAL, Scope
from app.memory.provenance import Provenance
from app.memory.rules import MemoryValidationError, Operation
from app.memory.service import MemoryService
from app.memory.writes import MemoryNotFoundError, WriteLimits
from tests.support.databases import stored
from tests.support.memory_db import add, is_history_insert, unknown_error, watch

TURN = Provenance(
    "turn", "0f8fad5b-d9cb-469f-a165-70867728950e", "7c9e6679-7425-40de-944b-e07fc1f90ae7"
)


def history_rows(engine: Engine, user_id: str | None = None) -> int:
    query = select(func.count()).select_from(memory_changes)
    if user_id is not None:
        query = query.where(memory_changes.c.user_id == user_id)
    with engine.connect() as connection:
        return int(connection.execute(query).scalar_one())


def pending(engine: Engine, user_id: str) -> list[proposals.Proposal]:
    with engine.connect() as connection:
        return proposals.pending(connection, user_id)


def entries(engine: Engine, user_id: str) -> list[history.HistoryEntry]:
    with engine.connect() as connection:
        return history.page(connection, user_id, limit=None) or []


def set_mode(engine: Engine, user_id: str, mode: str) -> None:
    MemoryService(engine).set_save_mode(user_id, mode)  # type: ignore[arg-type]


def replace(match: str, content: str) -> list[list[Operation]]:
    return [[Operation("user", "replace", match=match, content=content)]]


def test_a_fault_between_the_memory_write_and_the_history_write_leaves_neither(
    engine: Engine,
) -> None:
    """A real driver error raised by the history INSERT (after the memory row was written in
    the same transaction; on PostgreSQL the same statement carries the memory write) rolls both
    back; the control commit writes both, with provenance."""
    service = MemoryService(engine)

    def fail_history(statement: str) -> None:
        if is_history_insert(statement):
            raise unknown_error(engine.dialect.name)

    with watch(engine, fail_history) as log, pytest.raises(DBAPIError):
        service.commit_operations("alice", add("user", "Prefers tea."), provenance=TURN)
    assert log.writes, "the memory write was sent before the fault, or in the failing statement"
    assert stored(engine, "alice").user == ()
    assert history_rows(engine) == 0

    result = service.commit_operations("alice", add("user", "Prefers tea."), provenance=TURN)
    assert stored(engine, "alice").user == ("Prefers tea.",)
    [entry] = entries(engine, "alice")
    assert entry.id == result.change_id
    assert entry.provenance == TURN
    assert [(c.target, c.action, c.before, c.after) for c in entry.changes] == [
        ("user", "add", None, "Prefers tea.")
    ]


def test_a_history_row_the_database_refuses_rolls_the_memory_write_back(engine: Engine) -> None:
    """The database itself refuses the history row (its CHECK on `source`) after it executed the
    memory write, in the same transaction or, on PostgreSQL, the same statement: nothing of
    either is stored, and the history is not trimmed."""
    service = MemoryService(engine, limits=WriteLimits(history=1))
    service.commit_operations("alice", add("user", "Prefers tea."))
    refused = Provenance("bogus")  # type: ignore[arg-type]
    with pytest.raises(DBAPIError):
        service.commit_operations("alice", add("user", "Likes jazz."), provenance=refused)
    assert stored(engine, "alice").user == ("Prefers tea.",)
    assert history_rows(engine, "alice") == 1


def test_a_refused_or_empty_change_leaves_no_history(engine: Engine) -> None:
    """A batch refused by the rules, or one that changes nothing (a duplicate add), writes no
    history row: history records changes, not attempts."""
    service = MemoryService(engine)
    service.commit_operations("alice", add("user", "Prefers tea."))
    with pytest.raises(MemoryValidationError):
        service.commit_operations("alice", replace("nothing like it", "x"))
    assert service.commit_operations("alice", add("user", "Prefers tea.")).change_id is None
    assert history_rows(engine, "alice") == 1


def test_history_is_bounded_per_user_oldest_first(engine: Engine) -> None:
    """With MEMORY_HISTORY_LIMIT=3, five changes keep the three newest; another user's history
    is not touched by alice's trimming."""
    service = MemoryService(engine, limits=WriteLimits(history=3))
    service.commit_operations("bob", add("user", "Bob's fact."))
    for n in range(5):
        service.commit_operations("alice", add("memory", f"Fact number {n}."))
    kept = entries(engine, "alice")
    assert [e.changes[0].after for e in kept] == [f"Fact number {n}." for n in (4, 3, 2)]
    assert history_rows(engine, "bob") == 1


def test_history_is_bounded_per_scope(engine: Engine) -> None:
    """MEMORY_HISTORY_LIMIT bounds each scope of a person (outside projects, each project) on
    its own: a busy project trims its own oldest changes, never another scope's."""
    service = MemoryService(engine, limits=WriteLimits(history=3))
    busy, quiet = (service.create_project("alice", name).id for name in ("Busy", "Quiet"))
    for n in range(2):
        service.commit_operations("alice", add("memory", f"General fact {n}."))
    service.commit_operations("alice", add("project", "Quiet fact."), scope=Scope(quiet))
    for n in range(5):
        service.commit_operations("alice", add("project", f"Busy fact {n}."), scope=Scope(busy))

    def kept(project_id: str | None) -> list[str | None]:
        with engine.connect() as connection:
            found = history.page(connection, "alice", limit=None, project_id=project_id) or []
        return [entry.changes[0].after for entry in found]

    assert kept(busy) == [f"Busy fact {n}." for n in (4, 3, 2)]
    assert kept(None) == ["General fact 1.", "General fact 0."]
    assert kept(quiet) == ["Quiet fact."]


def test_proposals_are_bounded_per_scope(engine: Engine) -> None:
    """MEMORY_PROPOSAL_LIMIT bounds the pending proposals of each scope on its own."""
    service = MemoryService(engine, limits=WriteLimits(proposals=2))
    set_mode(engine, "alice", "ask")
    project = service.create_project("alice", "Client").id

    def propose(content: str, scope: Scope = GENERAL) -> str | None:
        return service.commit_operations(
            "alice", add("user", content), provenance=TURN, may_propose=True, scope=scope
        ).proposal_id

    general = [propose(f"General {n}.") for n in range(2)]
    scoped = [propose(f"Scoped {n}.", Scope(project)) for n in range(3)]
    with engine.connect() as connection:
        outside = proposals.pending(connection, "alice", project_id=None)
        inside = proposals.pending(connection, "alice", project_id=project)
    assert [p.id for p in outside] == [general[1], general[0]]
    assert [p.id for p in inside] == [scoped[2], scoped[1]]


def test_undo_restores_and_is_itself_a_change(engine: Engine) -> None:
    """Undoing a replace puts the previous entry back, recorded as an `undo` naming the change;
    undoing that undo redoes it; a change already undone cannot be undone twice."""
    service = MemoryService(engine)
    service.commit_operations("alice", add("user", "Prefers tea."))
    edit = service.commit_operations("alice", replace("tea", "Prefers coffee."))
    undo = service.commit_operations(
        "alice", [], provenance=Provenance("undo", undoes=edit.change_id)
    )
    assert stored(engine, "alice").user == ("Prefers tea.",)
    newest = entries(engine, "alice")[0]
    assert newest.id == undo.change_id
    assert newest.provenance.source == "undo" and newest.provenance.undoes == edit.change_id
    with pytest.raises(MemoryValidationError) as twice:
        service.commit_operations("alice", [], provenance=Provenance("undo", undoes=edit.change_id))
    assert twice.value.code == "stale_undo"
    service.commit_operations("alice", [], provenance=Provenance("undo", undoes=undo.change_id))
    assert stored(engine, "alice").user == ("Prefers coffee.",)


def test_undo_after_a_concurrent_edit_is_refused_and_writes_nothing(engine: Engine) -> None:
    """The entry an add produced was edited since: its undo is `stale_undo`, memory and history
    stay exactly as they were. Another user's change id is not found."""
    service = MemoryService(engine)
    added = service.commit_operations("alice", add("user", "Prefers tea."))
    service.commit_operations("alice", replace("tea", "Prefers green tea."))
    before = history_rows(engine, "alice")
    with pytest.raises(MemoryValidationError) as refused:
        service.commit_operations(
            "alice", [], provenance=Provenance("undo", undoes=added.change_id)
        )
    assert refused.value.code == "stale_undo"
    assert stored(engine, "alice").user == ("Prefers green tea.",)
    assert history_rows(engine, "alice") == before
    with pytest.raises(MemoryNotFoundError):
        service.commit_operations("bob", [], provenance=Provenance("undo", undoes=added.change_id))


def test_ask_mode_turns_a_turn_batch_into_a_proposal_accepted_like_a_staged_batch(
    engine: Engine,
) -> None:
    """Under `ask`, a turn's batch is stored as a proposal (memory and history untouched);
    accepting applies it to the latest memory and records a `proposal` change with the turn's
    ids; an API batch under `ask` still commits (the user's own edit)."""
    service = MemoryService(engine)
    set_mode(engine, "alice", "ask")
    result = service.commit_operations(
        "alice", add("user", "Prefers tea."), provenance=TURN, may_propose=True
    )
    assert result.proposal_id is not None and result.change_id is None
    assert stored(engine, "alice").user == () and history_rows(engine) == 0
    [proposal] = pending(engine, "alice")
    assert (proposal.turn_id, proposal.conversation_id) == (TURN.turn_id, TURN.conversation_id)
    service.commit_operations("alice", add("memory", "Own edit."))
    assert stored(engine, "alice").memory == ("Own edit.",)
    known = service.commit_operations(
        "alice", add("memory", "Own edit."), provenance=TURN, may_propose=True
    )
    assert known.proposal_id is None  # nothing to ask about: it is remembered already

    accepted = service.commit_operations(
        "alice", [], provenance=Provenance("proposal"), proposal_id=proposal.id
    )
    assert stored(engine, "alice").user == ("Prefers tea.",)
    assert pending(engine, "alice") == []
    newest = entries(engine, "alice")[0]
    assert newest.id == accepted.change_id
    assert newest.provenance == Provenance("proposal", TURN.turn_id, TURN.conversation_id)
    with pytest.raises(MemoryNotFoundError):
        service.commit_operations(
            "alice", [], provenance=Provenance("proposal"), proposal_id=proposal.id
        )


def test_a_stale_proposal_is_refused_and_kept(engine: Engine) -> None:
    """A proposal pinned to an entry that has changed since is `stale_match`: nothing written,
    the proposal stays for the user to reject. Another user cannot accept it."""
    service = MemoryService(engine)
    service.commit_operations("alice", add("user", "Prefers tea."))
    set_mode(engine, "alice", "ask")
    staged = [[Operation("user", "remove", match="Prefers tea.", pinned=True)]]
    proposal_id = service.commit_operations(
        "alice", staged, provenance=TURN, may_propose=True
    ).proposal_id
    service.commit_operations("alice", replace("tea", "Prefers coffee."))
    with pytest.raises(MemoryValidationError) as refused:
        service.commit_operations(
            "alice", [], provenance=Provenance("proposal"), proposal_id=proposal_id
        )
    assert refused.value.code == "stale_match"
    assert stored(engine, "alice").user == ("Prefers coffee.",)
    assert [p.id for p in pending(engine, "alice")] == [proposal_id]
    with pytest.raises(MemoryNotFoundError):
        service.commit_operations(
            "bob", [], provenance=Provenance("proposal"), proposal_id=proposal_id
        )


def test_proposals_are_bounded_and_expire(engine: Engine) -> None:
    """MEMORY_PROPOSAL_LIMIT=2 keeps the two newest; a proposal past its lifetime is not
    pending (nor acceptable) and is deleted with the next one."""
    service = MemoryService(engine, limits=WriteLimits(proposals=2))
    set_mode(engine, "alice", "ask")
    ids = [
        service.commit_operations(
            "alice", add("user", f"Fact {n}."), provenance=TURN, may_propose=True
        ).proposal_id
        for n in range(3)
    ]
    assert [p.id for p in pending(engine, "alice")] == [ids[2], ids[1]]
    expiring = MemoryService(engine, limits=WriteLimits(proposal_ttl=timedelta(0)))
    gone = expiring.commit_operations(
        "alice", add("user", "Short-lived."), provenance=TURN, may_propose=True
    ).proposal_id
    assert gone not in [p.id for p in pending(engine, "alice")]
    with pytest.raises(MemoryNotFoundError):
        service.commit_operations("alice", [], provenance=Provenance("proposal"), proposal_id=gone)
    # Rejecting an expired proposal is not-found too (the route's 404), and it is gone after;
    # a pending one is rejected once, and a second reject finds nothing.
    late = expiring.commit_operations(
        "alice", add("user", "Also short-lived."), provenance=TURN, may_propose=True
    ).proposal_id
    assert late is not None and service.reject("alice", late) is False
    assert service.reject("bob", ids[2]) is False  # not bob's
    assert service.reject("alice", ids[2]) is True
    assert service.reject("alice", ids[2]) is False
    assert [p.id for p in pending(engine, "alice")] == [ids[1]]


def test_forget_removes_history_and_proposals_and_keeps_the_save_mode(engine: Engine) -> None:
    """DELETE /v1/memory's service call: memory, history and proposals of alice are gone in one
    transaction, bob's stay, and alice's save mode (a preference, not memory) is kept."""
    service = MemoryService(engine)
    service.commit_operations("alice", add("user", "Prefers tea."))
    service.commit_operations("bob", add("user", "Bob's fact."))
    set_mode(engine, "alice", "ask")
    service.commit_operations("alice", add("user", "Proposed."), provenance=TURN, may_propose=True)
    service.forget("alice")
    assert stored(engine, "alice").user == ()
    assert history_rows(engine, "alice") == 0
    with engine.connect() as connection:
        left = connection.execute(
            select(func.count())
            .select_from(memory_proposals)
            .where(memory_proposals.c.user_id == "alice")
        ).scalar_one()
        mode = proposals.save_mode(connection, "alice")
    assert left == 0 and mode == "ask"
    assert history_rows(engine, "bob") == 1
