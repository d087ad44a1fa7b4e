"""The memory write path's owner: write-locked transactions, bounded retries, cancellation."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TypeVar

from sqlalchemy import Connection, Engine

from app.concurrency import CancelFlag, finish_even_if_cancelled, to_thread
from app.conversations.repository import Conversation
from app.conversations.search import optimize_fulltext
from app.conversations.service import is_conversation_id
from app.db import erasure_audit as audit
from app.db.deadline import DeadlineExceededError, within
from app.db.engine import one_statement_read
from app.db.locking import is_retryable, is_timeout, is_unique_violation
from app.db.writers import WriterLockTimeoutError
from app.memory import history, projects, proposals, repository, writes
from app.memory.projects import GENERAL, Project, Scope
from app.memory.provenance import Proposer, Provenance, SaveMode
from app.memory.repository import CancelCheck
from app.memory.rules import Operation, Snapshot, Target
from app.memory.unit_of_work import LockObserver, UnitOfWork, unit_of_work
from app.memory.until import visible
from app.memory.writes import API, Begun, WriteLimits, WriteRequest
from app.telemetry.sensitive import register_memory, register_operations

MAX_ATTEMPTS = 3
BACKOFF_SECONDS = 0.02
READ_TIMEOUT_SECONDS = 1.0  # MEMORY_READ_TIMEOUT_SECONDS's default

Batches = Sequence[Sequence[Operation]]
T = TypeVar("T")


class MemoryUnavailableError(RuntimeError):
    """Memory could not be read: callers fail open for reads and closed for writes."""


class MemoryBusyError(RuntimeError):
    """A commit ran out of its lock or statement bound (another writer held the user's rows,
    or the database was too slow); it was rolled back and nothing was written."""


@dataclass(frozen=True)
class CommitResult:
    snapshot: Snapshot
    changed: tuple[Target, ...]
    retry_count: int
    duration_ms: float
    change_id: str | None = None  # the history entry of this change (None: nothing changed)
    proposal_id: str | None = None  # set instead when the change was stored as a proposal


def _never() -> bool:
    return False


class MemoryService:
    def __init__(
        self,
        engine: Engine,
        *,
        max_attempts: int = MAX_ATTEMPTS,
        backoff_seconds: float = BACKOFF_SECONDS,
        read_timeout_seconds: float = READ_TIMEOUT_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
        limits: WriteLimits | None = None,
        erasure_key: bytes | None = None,
    ) -> None:
        self.engine = engine
        # The key of the erasure audit's subject hash (ERASURE_HASH_KEY; app/db/erasure_audit.py).
        self.erasure_key = erasure_key or audit.hash_key(None, telemetry=None, dev_secret=None)
        self.limits = limits or WriteLimits()
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds
        self.read_timeout_seconds = read_timeout_seconds
        self._sleep = sleep
        # Called just before each write asks for the user's lock, and inside it once the lock is
        # held (None in production; tests hold a writer there to prove that the user's other
        # writers wait for it).
        self.before_lock: LockObserver | None = None
        self.observe: LockObserver | None = None

    # -- reads ------------------------------------------------------------------------------

    def read(self, user_id: str) -> Snapshot:
        """The latest committed snapshot; any failure becomes MemoryUnavailableError.

        The read's transaction is rolled back, never committed: a reader has nothing to commit
        (on PostgreSQL there is none: `one_statement_read`).
        """
        try:
            with self.engine.connect() as connection:
                one_statement_read(connection)
                snapshot = repository.load_snapshot(connection, user_id)
                connection.rollback()
        except Exception as error:
            raise MemoryUnavailableError(type(error).__name__) from error
        register_memory(snapshot)  # memory content is scrubbed from this request's telemetry
        # An expired entry is never read (the next write records its expiry: `expire_due`).
        return visible(snapshot, history.now())

    def read_with_save_mode(
        self, user_id: str, scope: Scope = GENERAL
    ) -> tuple[Snapshot, SaveMode]:
        """`read` (`read_scoped` in a project), and the person's save mode: what a turn's start
        reads when memory is on. Outside projects both come from one statement; a project's
        documents and the mode share one connection."""
        read = self.read_with_save_mode_on(user_id, scope)
        try:
            connection = self.engine.connect()
        except Exception as error:
            raise MemoryUnavailableError(type(error).__name__) from error
        with connection:
            return read(connection)

    def read_with_save_mode_on(
        self, user_id: str, scope: Scope = GENERAL
    ) -> Callable[[Connection], tuple[Snapshot, SaveMode]]:
        """`read_with_save_mode` as work for a connection of the caller's, outside any
        transaction (after the limits' admission has committed, `LimitStore.admit_with`)."""

        def read(connection: Connection) -> tuple[Snapshot, SaveMode]:
            try:
                one_statement_read(connection)
                if scope.project_id is None:
                    snapshot, stored = repository.load_snapshot_and_save_mode(connection, user_id)
                    mode = proposals.mode_of(stored)
                else:
                    snapshot = repository.load_scoped(
                        connection, user_id, scope, project_limit=self.limits.project_chars
                    )
                    mode = proposals.save_mode(connection, user_id)
                connection.rollback()
            except projects.ProjectNotFoundError:
                raise
            except Exception as error:
                raise MemoryUnavailableError(type(error).__name__) from error
            register_memory(snapshot)
            return visible(snapshot, history.now()), mode

        return read

    async def read_with_save_mode_async(
        self, user_id: str, *, seconds: float, scope: Scope = GENERAL
    ) -> tuple[Snapshot, SaveMode]:
        """`read_with_save_mode` in a worker thread, within `seconds` (as `read_async`)."""
        try:
            return await within(
                seconds,
                lambda: to_thread(self.read_with_save_mode, user_id, scope),
                what="memory read",
            )
        except DeadlineExceededError as error:
            raise MemoryUnavailableError("DeadlineExceededError") from error

    async def read_async(
        self, user_id: str, *, seconds: float | None = None, scope: Scope = GENERAL
    ) -> Snapshot:
        """`read` (or `read_scoped`) in a worker thread, within `seconds` (default
        MEMORY_READ_TIMEOUT_SECONDS): past it, MemoryUnavailableError, and the abandoned read
        is broken off."""
        bound = self.read_timeout_seconds if seconds is None else seconds

        def read() -> Snapshot:
            if scope.project_id is None:
                return self.read(user_id)
            return self.read_scoped(user_id, scope)

        try:
            return await within(bound, lambda: to_thread(read), what="memory read")
        except DeadlineExceededError as error:
            raise MemoryUnavailableError("DeadlineExceededError") from error

    def read_scoped(self, user_id: str, scope: Scope) -> Snapshot:
        """The documents of `scope` (rules.scope_targets); ProjectNotFoundError when the project
        is not the user's, any other failure MemoryUnavailableError."""
        try:
            with self.engine.connect() as connection:
                one_statement_read(connection)
                snapshot = repository.load_scoped(
                    connection, user_id, scope, project_limit=self.limits.project_chars
                )
                connection.rollback()
        except projects.ProjectNotFoundError:
            raise
        except Exception as error:
            raise MemoryUnavailableError(type(error).__name__) from error
        register_memory(snapshot)
        return visible(snapshot, history.now())

    # -- projects -----------------------------------------------------------------------------

    def list_projects(self, user_id: str) -> list[Project]:
        with self.engine.connect() as connection:
            return projects.list_projects(connection, user_id)

    def get_project(self, user_id: str, project_id: str) -> Project | None:
        with self.engine.connect() as connection:
            return projects.get(connection, user_id, project_id)

    def create_project(self, user_id: str, name: str, general_memory: bool = False) -> Project:
        """ProjectLimitError past PROJECTS_MAX (counted under the user's writer lock)."""
        limit = self.limits.projects
        return self._run(
            user_id,
            "project",
            lambda unit: writes.create_project(unit, name, general_memory, limit),
            _never,
        )[0]

    def change_project(
        self,
        user_id: str,
        project_id: str,
        *,
        name: str | None = None,
        general_memory: bool | None = None,
    ) -> Project:
        return self._run(
            user_id,
            "project",
            lambda unit: writes.change_project(unit, project_id, name, general_memory),
            _never,
        )[0]

    def delete_project(self, user_id: str, project_id: str, conversations: str | None) -> int:
        """writes.delete_project; on MariaDB the deleted messages' words leave the FULLTEXT
        index after the transaction."""
        count = self._run(
            user_id,
            "project",
            lambda unit: writes.delete_project(unit, project_id, conversations),
            _never,
        )[0]
        if count and conversations == "delete":
            optimize_fulltext(self.engine)
        return count

    def move_conversation(
        self, user_id: str, conversation_id: str, project_id: str | None
    ) -> Conversation | None:
        """writes.move_conversation (an id of the wrong shape is simply not the owner's)."""
        if not is_conversation_id(conversation_id):
            return None
        return self._run(
            user_id,
            "project",
            lambda unit: writes.move_conversation(unit, conversation_id, project_id),
            _never,
        )[0]

    # -- writes -----------------------------------------------------------------------------
    # Every write runs in one unit of work (app/memory/unit_of_work.py) that holds the user's
    # writer lock: the user's writers are serial on every dialect (docs/design.md, "Isolation").

    def _run(
        self, user_id: str, what: str, work: Callable[[UnitOfWork], T], should_cancel: CancelCheck
    ) -> tuple[T, int]:
        """Run `work` in a unit of work; returns its result and the number of retries.

        Only recognised deadlock/serialization failures (and the first-insert race) are
        retried, replaying the whole transaction; validation errors and unknown failures are not.
        A lock or statement timeout is MemoryBusyError: rolled back, not retried.
        """
        attempt = 0
        while True:
            attempt += 1
            try:
                with unit_of_work(
                    self.engine, user_id, what, before=self.before_lock, observe=self.observe
                ) as unit:
                    return work(unit), attempt - 1
            except Exception as error:
                retryable = is_retryable(error) or is_unique_violation(error)
                if retryable and attempt < self.max_attempts and not should_cancel():
                    self._sleep(self.backoff_seconds * attempt * (0.5 + random.random()))
                    continue
                if is_timeout(error) or isinstance(error, WriterLockTimeoutError):
                    raise MemoryBusyError("the memory write ran out of its time bound") from error
                raise

    def commit_operations(
        self,
        user_id: str,
        batches: Batches,
        should_cancel: CancelCheck = _never,
        *,
        provenance: Provenance = API,
        proposal_id: str | None = None,
        may_propose: bool = False,
        begun_at: datetime | None = None,
        scope: Scope = GENERAL,
    ) -> CommitResult:
        """Apply staged batches (or an undo, or an accepted proposal) to the latest stored
        snapshot under the user's writer lock, recording the change in the history in the same
        transaction (writes.write). `begun_at`: when the turn began; if the user was erased
        since, nothing is written (SubjectErasedError)."""
        started = time.perf_counter()
        register_operations(batches)  # before any SQL: bound parameters carry this content
        begun = None
        if begun_at is not None:
            begun = Begun(audit.subject_hash(self.erasure_key, user_id), begun_at)
        request = WriteRequest(provenance, batches, proposal_id, may_propose, begun, scope)
        what = "proposal" if proposal_id is not None else provenance.source
        written, retries = self._run(
            user_id,
            what,
            lambda unit: writes.write(unit, request, self.limits, should_cancel),
            should_cancel,
        )
        return CommitResult(
            snapshot=written.snapshot,
            changed=written.changed,
            retry_count=retries,
            duration_ms=(time.perf_counter() - started) * 1000,
            change_id=written.change_id,
            proposal_id=written.proposal_id,
        )

    async def commit_in_worker(
        self,
        user_id: str,
        batches: Batches,
        cancel_event: CancelFlag,
        *,
        provenance: Provenance = API,
        proposal_id: str | None = None,
        may_propose: bool = False,
        begun_at: datetime | None = None,
        scope: Scope = GENERAL,
    ) -> CommitResult:
        """Run the commit in a worker thread; cancellation reaches it through `cancel_event`.

        A cancelled caller keeps waiting for the worker (its own bounds end it), so the
        repository, not the event loop, makes the final rollback decision inside the
        transaction.
        """
        return await finish_even_if_cancelled(
            to_thread(
                partial(
                    self.commit_operations,
                    user_id,
                    batches,
                    cancel_event.is_set,
                    provenance=provenance,
                    proposal_id=proposal_id,
                    may_propose=may_propose,
                    begun_at=begun_at,
                    scope=scope,
                )
            ),
            on_cancel=cancel_event.set,
            cleanup_seconds=None,
        )

    def propose(
        self, user_id: str, batches: Batches, proposer: Proposer, scope: Scope = GENERAL
    ) -> CommitResult:
        """Store `batches` as a proposal for the user to review (an import), never as a change;
        `proposal_id` is None when they would change nothing. A batch that breaks a rule raises
        MemoryValidationError and stores nothing."""
        started = time.perf_counter()
        register_operations(batches)
        written, retries = self._run(
            user_id,
            "propose",
            lambda unit: writes.propose(unit, batches, proposer, self.limits, scope),
            _never,
        )
        return CommitResult(
            snapshot=written.snapshot,
            changed=(),
            retry_count=retries,
            duration_ms=(time.perf_counter() - started) * 1000,
            proposal_id=written.proposal_id,
        )

    async def propose_async(
        self, user_id: str, batches: Batches, proposer: Proposer, scope: Scope = GENERAL
    ) -> CommitResult:
        return await to_thread(self.propose, user_id, batches, proposer, scope)

    def forget(self, user_id: str) -> int:
        """Memory, its history and pending proposals, in one transaction: nothing committed
        before it returns remains."""
        return self._run(user_id, "forget", writes.forget, _never)[0]

    async def forget_async(self, user_id: str) -> int:
        return await to_thread(self.forget, user_id)

    def forget_project(self, user_id: str, project_id: str) -> int:
        """One project's document, history and proposals, in one transaction."""
        return self._run(
            user_id, "forget", lambda unit: writes.forget_project(unit, project_id), _never
        )[0]

    async def forget_project_async(self, user_id: str, project_id: str) -> int:
        return await to_thread(self.forget_project, user_id, project_id)

    def erase(self, user_id: str, stamp: datetime) -> int:
        """Erasure's first step (writes.erase): the unfinished audit row and every row of the
        user's memory state, in one transaction under their writer lock. Returns the memory
        documents removed."""
        digest = audit.subject_hash(self.erasure_key, user_id)
        return self._run(user_id, "erase", lambda unit: writes.erase(unit, digest, stamp), _never)[
            0
        ]

    def expire_history(self, user_id: str, cutoff: datetime, limit: int) -> int:
        """Retention: at most `limit` of the user's history entries older than `cutoff`, in one
        small transaction under their writer lock."""
        return self._run(
            user_id,
            "retention",
            lambda unit: writes.expire_history(unit, cutoff, limit),
            _never,
        )[0]

    def expire_entries(self, user_id: str) -> int:
        """The purge's sweep (writes.expire_entries): the user's entries whose time has come
        leave memory, recorded as a change of source `expired`, in one unit of work."""
        limits = self.limits
        return self._run(
            user_id, "expired", lambda unit: writes.expire_entries(unit, limits), _never
        )[0]

    def reject(self, user_id: str, proposal_id: str, scope: Scope = GENERAL) -> bool:
        """Delete a pending proposal; False when it is not the caller's, not of `scope`'s
        project, or no longer pending (accepted, rejected or expired)."""
        return self._run(
            user_id, "reject", lambda unit: writes.reject(unit, proposal_id, scope), _never
        )[0]

    async def reject_async(self, user_id: str, proposal_id: str, scope: Scope = GENERAL) -> bool:
        return await to_thread(self.reject, user_id, proposal_id, scope)

    def set_save_mode(self, user_id: str, mode: SaveMode) -> None:
        self._run(user_id, "save_mode", lambda unit: writes.set_save_mode(unit, mode), _never)

    async def set_save_mode_async(self, user_id: str, mode: SaveMode) -> None:
        await to_thread(self.set_save_mode, user_id, mode)

    def set_recall_chats(self, user_id: str, recall: bool) -> None:
        self._run(
            user_id, "recall_chats", lambda unit: writes.set_recall_chats(unit, recall), _never
        )

    async def set_recall_chats_async(self, user_id: str, recall: bool) -> None:
        await to_thread(self.set_recall_chats, user_id, recall)
