"""Every write to a user's memory state, each run inside a unit of work (app/memory/unit_of_work.py,
which holds the user's writer lock): a batch, the inverse of a recorded change or an accepted
proposal applied to the latest snapshot and recorded in the history (or, for a turn or an MCP
client under `save_mode: ask`, stored as a proposal); an import's proposal; forgetting;
erasing; rejecting a proposal; the save mode.
The caller (MemoryService) opens the unit of work and retries it whole."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

from sqlalchemy import Connection, Insert, select

from app.conversations import repository as transcripts
from app.db import erasure_audit as audit
from app.memory import expiries, history, projects, proposals, repository
from app.memory.ledger import replay, replay_changes
from app.memory.projects import GENERAL, Project, Scope
from app.memory.provenance import (
    Batches,
    Proposer,
    Provenance,
    SaveMode,
    entry_strings,
    inverse,
    proposal_strings,
    stale_undo,
)
from app.memory.repository import CancelCheck, check_cancel
from app.memory.rules import GENERAL_TARGETS, Change, MemoryValidationError, Snapshot, Target
from app.memory.unit_of_work import UnitOfWork
from app.memory.until import expire
from app.telemetry.sensitive import register_memory, register_operations, register_sensitive

API = Provenance("api")
EXPIRED = Provenance("expired")


class MemoryNotFoundError(LookupError):
    """The change or proposal named is not the caller's (or does not exist, or has expired)."""


class SubjectErasedError(LookupError):
    """The user was erased after this turn began: its commit has nothing to write into."""


@dataclass(frozen=True)
class Begun:
    """When a turn began, and its user's erasure hash: an erasure since then (found under the
    writer lock, which the erasure held too) leaves the turn's commit nothing to write."""

    subject_hash: str
    at: datetime


@dataclass(frozen=True)
class WriteLimits:
    """MEMORY_HISTORY_LIMIT, MEMORY_PROPOSAL_LIMIT, MEMORY_PROPOSAL_TTL_HOURS,
    PROJECT_MEMORY_CHARS and PROJECTS_MAX."""

    history: int = 200
    proposals: int = 20
    proposal_ttl: timedelta = timedelta(days=7)
    project_chars: int = 2_200  # PROJECT_MEMORY_CHARS
    projects: int = 100  # PROJECTS_MAX


@dataclass(frozen=True)
class WriteRequest:
    """What one commit is asked to do. `proposal_id`: accept that proposal (its batches are the
    write, and it is deleted with it). An undo's provenance names the change it reverses.
    `may_propose`: a turn's batch, which becomes a proposal when the user asks first.
    `scope`: the project the write runs in (an undone change or an accepted proposal must have
    been made in the same one, or it reads as absent)."""

    provenance: Provenance = API
    batches: Batches = ()
    proposal_id: str | None = None
    may_propose: bool = False
    begun: Begun | None = None
    scope: Scope = GENERAL


@dataclass(frozen=True)
class Written:
    snapshot: Snapshot
    changed: tuple[Target, ...]
    change_id: str | None = None
    proposal_id: str | None = None


def resolve(
    connection: Connection, user_id: str, request: WriteRequest
) -> tuple[Batches, Provenance]:
    """The batches to apply and where they come from, read inside the transaction so that they
    are the latest (an accepted proposal keeps the turn and conversation it came from)."""
    undoes = request.provenance.undoes
    project_id = request.scope.project_id
    if undoes is not None:
        entry = history.get(connection, user_id, undoes)
        if entry is None or entry.project_id != project_id:
            raise MemoryNotFoundError("no such change")
        register_sensitive(*entry_strings(entry))
        # An undone expiry brings its entries back to stay: their time had come.
        operations = inverse(entry.changes, restore_until=entry.provenance.source != "expired")
        if not operations or history.was_undone(connection, user_id, undoes):
            raise stale_undo()
        return [operations], request.provenance
    if request.proposal_id is not None:
        proposal = proposals.get(connection, user_id, request.proposal_id)
        if proposal is None or proposal.project_id != project_id:
            raise MemoryNotFoundError("no such proposal")
        register_sensitive(*proposal_strings(proposal))
        return proposal.batches, Provenance(
            "proposal", proposal.turn_id, proposal.conversation_id, client=proposal.client
        )
    return request.batches, request.provenance


# What a turn's commit reads besides its memory, under the user's lock: whether the person was
# erased since the turn began, and their save mode (a turn may propose).
_TURN_READS = select(audit.erased_since_column(), proposals.save_mode_column())


def write(
    unit: UnitOfWork, request: WriteRequest, limits: WriteLimits, should_cancel: CancelCheck
) -> Written:
    connection, user_id = unit.connection, unit.user_id
    check_cancel(should_cancel, "before the query")
    begun = request.begun
    if begun is not None:
        # A turn's commit: both its reads under the lock in one statement, before the scope's
        # documents (an erased person's project is gone: the erasure is the answer then).
        erased, mode = connection.execute(
            _TURN_READS,
            {"subject_hash": begun.subject_hash, "since": begun.at, "owner_id": user_id},
        ).one()
        if erased:
            raise SubjectErasedError("the user was erased while this turn ran")
        asks = request.may_propose and proposals.mode_of(mode) == "ask"
    else:
        asks = request.may_propose and proposals.save_mode(connection, user_id) == "ask"
    current = repository.load_scoped(
        connection, user_id, request.scope, project_limit=limits.project_chars, lock=True
    )
    register_memory(current)
    current = expire_due(unit, current, request.scope, limits)
    batches, provenance = resolve(connection, user_id, request)
    register_operations(batches)  # before the SQL that binds them
    if asks:
        # Under the same rules: a refused batch is never proposed; one that would change
        # nothing (facts already remembered) is not worth asking about.
        if replay(current, batches) == current:
            check_cancel(should_cancel, "before the transaction ended")
            return Written(current, ())
        check_cancel(should_cancel, "before persistence")
        proposal_id = proposals.add(
            unit,
            batches,
            turn_id=provenance.turn_id,
            conversation_id=provenance.conversation_id,
            ttl=limits.proposal_ttl,
            keep=limits.proposals,
            proposer=provenance.proposer,
            client=provenance.client,
            project_id=request.scope.project_id,
        )
        check_cancel(should_cancel, "before the transaction ended")
        return Written(current, (), proposal_id=proposal_id)
    try:
        updated, changes = replay_changes(current, batches)
    except MemoryValidationError as error:
        if provenance.undoes is not None and error.code == "stale_match":
            raise stale_undo() from None
        raise
    check_cancel(should_cancel, "before persistence")
    changed, change_id = persist(
        unit,
        provenance,
        current,
        updated,
        changes,
        keep=limits.history,
        project_id=request.scope.project_id,
    )
    if request.proposal_id is not None and not proposals.remove(unit, request.proposal_id):
        raise MemoryNotFoundError("no such proposal")  # unreachable under the lock; never saved
    check_cancel(should_cancel, "before the transaction ended")
    return Written(updated, tuple(changed), change_id=change_id)


def persist(
    unit: UnitOfWork,
    provenance: Provenance,
    current: Snapshot,
    updated: Snapshot,
    changes: Sequence[Change],
    *,
    keep: int,
    project_id: str | None = None,
) -> tuple[list[Target], str | None]:
    """Write the documents that changed and their history row, and trim the history of the
    change's scope (outside projects, or its project) to its newest `keep` entries; nothing when
    nothing changed. Returns the changed targets and the
    history entry's id.

    PostgreSQL runs it all as one statement (the document writes and the trim as
    data-modifying CTEs of the history insert): one round trip instead of three or four,
    inside the per-user lock. Its parts touch different rows and share one snapshot, which
    the trim accounts for (history.TRIM_BEFORE_INSERT). MariaDB/MySQL and SQLite have no
    data-modifying CTEs, and MariaDB refuses a DELETE that reads its own table: one statement
    each there. Every statement is built once and bound per call. `project_id`: the project the
    change was made in (its document's key, and the history entry's project).
    """
    connection, user_id = unit.connection, unit.user_id
    writes, contents = repository.document_writes(current, updated)
    expiring = current.expiries != updated.expiries
    if not writes and not expiring:
        return [], None
    if expiring:
        expiries.persist(unit, current, updated, project_id)
    changed = [target for target, _ in writes]
    changed += sorted(
        {target for target, _, _ in current.expiries ^ updated.expiries} - set(changed)
    )
    bound: dict[str, str | None] = {**contents, "project_key": project_id}
    entry = history.entry_params(user_id, provenance, changes, project_id)
    if connection.dialect.name == "postgresql":
        params = {**entry, **bound, "keep_older": keep - 1}
        connection.execute(_in_one_statement(tuple(writes)), params)
        return changed, str(entry["entry_id"])
    for target, kind in writes:
        connection.execute(
            repository.document_statement(target, kind), {"owner_id": user_id, **bound}
        )
    connection.execute(history.ENTRY_INSERT, entry)
    history.trim(unit, project_id, keep)
    return changed, str(entry["entry_id"])


@cache
def _in_one_statement(writes: tuple[tuple[Target, repository.DocumentWrite], ...]) -> Insert:
    parts = [
        repository.document_statement(target, kind).cte(f"write_{target}")
        for target, kind in writes
    ]
    return history.ENTRY_INSERT.add_cte(*parts, history.TRIM_BEFORE_INSERT.cte("trimmed"))


def expire_due(
    unit: UnitOfWork,
    current: Snapshot,
    scope: Scope,
    limits: WriteLimits,
    now: datetime | None = None,
) -> Snapshot:
    """Remove the entries of `current` whose time has come, recording them in the history as
    one change of source `expired` (before the write that found them, in its transaction);
    returns the snapshot without them. Every write runs it first, so a write never applies to
    an entry that has expired, and the purge runs it alone for people who write nothing."""
    remaining, changes = expire(current, now or history.now())
    if not changes:
        return current
    persist(
        unit,
        EXPIRED,
        current,
        remaining,
        changes,
        keep=limits.history,
        project_id=scope.project_id,
    )
    return remaining


def propose(
    unit: UnitOfWork,
    batches: Batches,
    proposer: Proposer,
    limits: WriteLimits,
    scope: Scope = GENERAL,
) -> Written:
    """Store `batches` as a proposal, never as a change (an import): only when they pass the
    rules against the latest snapshot and would change something (no proposal_id otherwise)."""
    connection, user_id = unit.connection, unit.user_id
    current = repository.load_scoped(
        connection, user_id, scope, project_limit=limits.project_chars, lock=True
    )
    register_memory(current)
    current = expire_due(unit, current, scope, limits)
    register_operations(batches)
    if replay(current, batches) == current:
        return Written(current, ())
    proposal_id = proposals.add(
        unit,
        batches,
        turn_id=None,
        conversation_id=None,
        ttl=limits.proposal_ttl,
        keep=limits.proposals,
        proposer=proposer,
        project_id=scope.project_id,
    )
    return Written(current, (), proposal_id=proposal_id)


def forget(unit: UnitOfWork) -> int:
    """Memory (every project's document too), its history, pending proposals and the sources
    stored with the person's answers; the save mode and the projects themselves (names,
    settings) stay."""
    connection, user_id = unit.connection, unit.user_id
    removed = repository.delete_all(unit)
    removed += projects.forget_documents(unit)
    expiries.delete_all(unit)
    history.delete_all(unit)
    proposals.delete_all(unit)
    # The answers' sources hold copies of memory entries: forgotten with them (the answers stay).
    transcripts.clear_sources(connection, user_id)
    return removed


def forget_project(unit: UnitOfWork, project_id: str) -> int:
    """One project's document, its expiries, history and proposals; the project stays."""
    expiries.delete_document(unit, project_id)
    return projects.forget(unit, project_id)


def erase(unit: UnitOfWork, subject_hash: str, stamp: datetime) -> int:
    """The first step of erasing a person: the audit row (unfinished) and all of their memory
    state, preferences included, in one transaction under their writer lock. A turn's commit
    that runs after it finds the audit row and writes nothing; one that ran before it is
    deleted here."""
    audit.mark_started(unit.connection, subject_hash, stamp)
    removed = forget(unit)
    proposals.delete_preferences(unit)
    projects.delete_all(unit)
    return removed


def expire_history(unit: UnitOfWork, cutoff: datetime, limit: int) -> int:
    """Retention: at most `limit` of the user's history entries older than `cutoff` (a small
    transaction, so the user's writer lock is held briefly)."""
    return history.delete_older_than(unit, cutoff, limit)


def expire_entries(unit: UnitOfWork, limits: WriteLimits) -> int:
    """The purge's sweep of one user: every entry whose time has come, in each document that has
    one (a project's in that project's scope); returns how many entries expired. A row left by
    an entry that is gone is dropped."""
    connection, user_id = unit.connection, unit.user_id
    count, now = 0, history.now()
    documents = expiries.due_documents(connection, user_id, now)
    scopes = {
        GENERAL if document in GENERAL_TARGETS else Scope(document, owner=True)
        for document in documents
    }
    for scope in scopes:
        try:
            current = repository.load_scoped(
                connection, user_id, scope, project_limit=limits.project_chars, lock=True
            )
        except projects.ProjectNotFoundError:
            current = None
        if current is not None:
            remaining = expire_due(unit, current, scope, limits, now)
            count += len(current.expiries) - len(remaining.expiries)
    expiries.delete_due(unit, now)  # rows of entries no longer there
    return count


def reject(unit: UnitOfWork, proposal_id: str, scope: Scope = GENERAL) -> bool:
    """Delete a pending proposal; False when it is not the user's, was not staged in `scope`'s
    project, was already accepted or rejected, or has expired (the same 404 either way)."""
    found = proposals.get(unit.connection, unit.user_id, proposal_id)
    if found is not None and found.project_id != scope.project_id:
        return False
    return proposals.remove(unit, proposal_id, pending_only=True)


# -- projects --------------------------------------------------------------------------------


def create_project(unit: UnitOfWork, name: str, general_memory: bool, limit: int) -> Project:
    return projects.create(unit, name, general_memory, limit=limit)


def change_project(
    unit: UnitOfWork, project_id: str, name: str | None, general_memory: bool | None
) -> Project:
    return projects.change(unit, project_id, name=name, general_memory=general_memory)


def delete_project(unit: UnitOfWork, project_id: str, conversations: str | None) -> int:
    """The project, its document, history and proposals, in one transaction with what happens
    to its conversations: `delete` (with their messages and search index rows) or `detach`
    (they become general conversations). None with conversations left: ProjectNotEmptyError.
    Returns the number of conversations deleted or detached."""
    connection, user_id = unit.connection, unit.user_id
    # The row for update first: a conversation starting in the project holds it shared until
    # its row is written (`app.conversations.repository.hold_project`), so it is counted here.
    projects.require(connection, user_id, project_id, for_update=True)
    count = projects.conversation_count(connection, user_id, project_id)
    if count and conversations is None:
        raise projects.ProjectNotEmptyError(count)
    if count and conversations == "delete":
        transcripts.remove_project(connection, user_id, project_id)
    elif count:
        transcripts.detach_project(connection, user_id, project_id)
    expiries.delete_document(unit, project_id)
    projects.remove(unit, project_id)
    return count


def move_conversation(
    unit: UnitOfWork, conversation_id: str, project_id: str | None
) -> transcripts.Conversation | None:
    """Put the owner's conversation in `project_id` (ProjectNotFoundError when that is not the
    owner's project) or, with None, outside projects; None when the conversation is not theirs.
    Under the writer lock, like a project's deletion: a move and a deletion of its project are
    serial, so a conversation never points at a project that is gone."""
    connection, user_id = unit.connection, unit.user_id
    if transcripts.get(connection, user_id, conversation_id) is None:
        return None
    if project_id is not None:
        projects.require(connection, user_id, project_id)
    transcripts.move(connection, user_id, conversation_id, project_id)
    return transcripts.get(connection, user_id, conversation_id)


def set_save_mode(unit: UnitOfWork, mode: SaveMode) -> None:
    proposals.set_save_mode(unit, mode)


def set_recall_chats(unit: UnitOfWork, recall: bool) -> None:
    proposals.set_recall_chats(unit, recall)


def probe(unit: UnitOfWork) -> bool:
    """The readiness probe's writes: insert a document, read it, update it, read it again.
    Whether both reads saw the writes; the caller rolls the unit of work back."""
    connection, owner = unit.connection, {"owner_id": unit.user_id}
    connection.execute(
        repository.document_statement("memory", "insert"), {**owner, "memory_document": "a"}
    )
    first = repository.load_snapshot(connection, unit.user_id)
    connection.execute(
        repository.document_statement("memory", "update"), {**owner, "memory_document": "b"}
    )
    second = repository.load_snapshot(connection, unit.user_id)
    return first.memory == ("a",) and second.memory == ("b",)
