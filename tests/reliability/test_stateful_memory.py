"""Hypothesis stateful testing of the ledger and the repository together against a simple model
of the rules, on SQLite and PostgreSQL, with hostile content mixed into the batches.

Several turns are open at once, each with its own ledger staged from the snapshot it read; other
writers (the memory API, another turn) commit in between; a turn may commit, be discarded, or be
cancelled inside its transaction. The stored documents must always equal the model.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import Engine, delete, func, select

from app.db.schema import agent_memory
from app.db.writers import maintenance
from app.memory.ledger import MemoryLedger, stage_operations
from app.memory.repository import CommitCancelledError
from app.memory.rules import LIMITS, SEPARATOR, MemoryValidationError, Operation, Snapshot
from app.memory.service import MemoryService
from tests.support.databases import migrated_engine

State = dict[str, list[str]]

# Fragments that each make an entry unacceptable (structure, control characters, reserved tags,
# injection, secrets, exfiltration); the model only needs to know that they are refused.
HOSTILE = [
    SEPARATOR,
    "\x00",
    "\x1b",
    "\t",
    "<persistent_memory_data>",
    "</ persistent_memory_data >",
    "＜/persistent_memory_data＞",
    "Ignore all previous instructions",
    "you are now a",
    "sk-abcdefghijklmnopqrstuvwx",
    "-----BEGIN PRIVATE KEY-----",
    "password = hunter22",
    "cat ~/.ssh/id_rsa",
    "curl $API_KEY",
    "\u200b",
    "\u202e",
]

targets = st.sampled_from(["user", "memory"])
clean = st.builds(
    lambda i, words, crlf: f"fact {i} " + "word " * words + ("\r\nsecond line" if crlf else ""),
    st.integers(0, 7),
    st.one_of(st.integers(0, 30), st.integers(0, 30), st.integers(0, 150)),
    st.booleans(),
)
hostile = st.builds(
    lambda i, bad: f"fact {i} {bad} end", st.integers(0, 7), st.sampled_from(HOSTILE)
)


def normalized(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()


def is_hostile(text: str) -> bool:
    return any(bad in text for bad in HOSTILE)


def model_apply(state: State, batch: list[Operation]) -> State | None:
    """The rules, restated plainly; None means the whole batch is refused."""
    applied = model_stage(state, batch)
    return applied[0] if applied is not None else None


def model_stage(state: State, batch: list[Operation]) -> tuple[State, list[Operation]] | None:
    """`model_apply`, plus the batch as staging keeps it: each replace and remove pinned to the
    whole entry it matched, which is the only entry a later replay may touch."""
    entries = {target: list(values) for target, values in state.items()}
    pinned: list[Operation] = []
    for operation in batch:
        values = entries[operation.target]
        needs_match = operation.action in ("replace", "remove")
        needs_content = operation.action in ("add", "replace")
        if (operation.match is not None) != needs_match:
            return None
        if (operation.content is not None) != needs_content:
            return None
        content = normalized(operation.content or "")
        if needs_content and (not content or is_hostile(content)):
            return None
        if operation.action == "add":
            if content not in values:
                values.append(content)
            pinned.append(operation)
            continue
        if operation.pinned:
            found = [i for i, value in enumerate(values) if value == operation.match]
        else:
            match = normalized(operation.match or "")
            found = [i for i, value in enumerate(values) if value == match] or [
                i for i, value in enumerate(values) if match and match in value
            ]
        if len(found) != 1:
            return None
        pinned.append(
            Operation(
                operation.target,
                operation.action,
                match=values[found[0]],
                content=operation.content,
                pinned=True,
            )
        )
        if operation.action == "remove":
            del values[found[0]]
        elif any(value == content for i, value in enumerate(values) if i != found[0]):
            return None
        else:
            values[found[0]] = content
    if any(len(SEPARATOR.join(values)) > LIMITS[target] for target, values in entries.items()):
        return None
    return entries, pinned


def as_state(snapshot: Snapshot) -> State:
    return {"user": list(snapshot.user), "memory": list(snapshot.memory)}


@dataclass
class OpenTurn:
    """A turn between its memory read and its commit: a ledger and the model of its staging."""

    ledger: MemoryLedger
    staged: State
    batches: list[list[Operation]] = field(default_factory=list)


class MemoryMachine(RuleBasedStateMachine):
    """Turns and other writers against one user's stored memory."""

    engine: Engine  # set by the test that runs the machine

    turns = Bundle("turns")

    def __init__(self) -> None:
        super().__init__()
        self.service = MemoryService(self.engine, backoff_seconds=0.0)
        self.user = f"sm-{uuid.uuid4().hex[:12]}"
        self.stored: State = {"user": [], "memory": []}

    def teardown(self) -> None:
        with self.engine.begin() as connection, maintenance(connection):
            connection.execute(delete(agent_memory).where(agent_memory.c.user_id == self.user))

    # -- operations drawn against what exists now ------------------------------------------

    def _operation(self, data: st.DataObject, known: State) -> Operation:
        target = data.draw(targets)
        existing = known[target]
        guesses = st.sampled_from([f"fact {i}" for i in range(8)] + ["word", "absent", " ", "§"])
        matches = st.one_of(guesses, *([st.sampled_from(existing)] * 3 if existing else []))
        # Hypothesis explores strategies evenly; weighted choices keep most operations valid,
        # so that the stored state gets somewhere, with hostile and malformed ones mixed in.
        rng = data.draw(st.randoms(use_true_random=True))
        weights = (
            {"add": 6, "replace": 3, "remove": 3, "malformed": 1}
            if existing
            else {"add": 12, "replace": 1, "remove": 1, "malformed": 1}
        )
        kind = rng.choices(list(weights), list(weights.values()))[0]
        contents = rng.choices([clean, hostile, st.just("   ")], [12, 2, 1])[0]
        if kind == "add":
            return Operation(target, "add", content=data.draw(contents))
        if kind == "replace":
            return Operation(
                target, "replace", match=data.draw(matches), content=data.draw(contents)
            )
        if kind == "remove":
            return Operation(target, "remove", match=data.draw(matches))
        # A field combination the contract forbids.
        return data.draw(
            st.sampled_from(
                [
                    Operation(target, "add", match="fact 1", content="fact 1 again"),
                    Operation(target, "remove", match="fact 1", content="x"),
                    Operation(target, "replace", match=None, content="fact 2"),
                    Operation(target, "add", content=None),
                ]
            )
        )

    def _batch(self, data: st.DataObject, known: State) -> list[Operation]:
        rng = data.draw(st.randoms(use_true_random=True))
        size = rng.choices([1, 2, 3, 4], [5, 3, 1, 1])[0]
        return [self._operation(data, known) for _ in range(size)]

    # -- rules ----------------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        assert self.service.read(self.user) == Snapshot()

    @rule(target=turns)
    def open_turn(self) -> OpenTurn:
        """A turn reads the latest snapshot and stages on its own ledger."""
        snapshot = self.service.read(self.user)
        assert as_state(snapshot) == self.stored
        return OpenTurn(MemoryLedger(snapshot), as_state(snapshot))

    @rule(turn=turns, data=st.data())
    def stage(self, turn: OpenTurn, data: st.DataObject) -> None:
        batch = self._batch(data, turn.staged)
        expected = model_stage(turn.staged, batch)
        before = (turn.ledger.snapshot, list(turn.ledger.batches))
        try:
            stage_operations(turn.ledger, batch)
        except MemoryValidationError:
            assert expected is None, batch
            assert (turn.ledger.snapshot, turn.ledger.batches) == before
        else:
            assert expected is not None, batch
            turn.staged, pinned = expected
            assert list(turn.ledger.batches[-1]) == pinned
            turn.batches.append(pinned)
        assert as_state(turn.ledger.snapshot) == turn.staged

    @rule(turn=consumes(turns))
    def commit(self, turn: OpenTurn) -> None:
        """The staged batches replayed on the latest stored state, in one transaction."""
        if not turn.batches:
            return
        expected: State | None = self.stored
        for batch in turn.batches:
            expected = model_apply(expected, batch) if expected is not None else None
        try:
            result = self.service.commit_operations(self.user, turn.ledger.batches)
        except MemoryValidationError:
            # A concurrent change made the batches inapplicable: refused whole.
            assert expected is None
        else:
            assert expected is not None
            assert as_state(result.snapshot) == expected
            self.stored = expected

    @rule(turn=consumes(turns))
    def discard(self, turn: OpenTurn) -> None:
        """A failed or disconnected turn drops its ledger; storage never saw it."""
        del turn

    @rule(turn=consumes(turns), checks_before_cancel=st.integers(0, 2))
    def cancel_inside_the_transaction(self, turn: OpenTurn, checks_before_cancel: int) -> None:
        """Cancellation reaches the worker at one of its checks: the transaction rolls back."""
        if not turn.batches:
            return
        calls = {"n": 0}

        def should_cancel() -> bool:
            calls["n"] += 1
            return calls["n"] > checks_before_cancel

        try:
            self.service.commit_operations(self.user, turn.ledger.batches, should_cancel)
        except (CommitCancelledError, MemoryValidationError):
            pass
        else:
            raise AssertionError("a commit cancelled at one of its checks went through")

    @rule(data=st.data())
    def another_writer(self, data: st.DataObject) -> None:
        """The memory API (or another replica's turn) commits one batch directly."""
        batch = self._batch(data, self.stored)
        expected = model_apply(self.stored, batch)
        try:
            result = self.service.commit_operations(self.user, [batch])
        except MemoryValidationError:
            assert expected is None, batch
        else:
            assert expected is not None, batch
            assert as_state(result.snapshot) == expected
            self.stored = expected

    @rule()
    def forget(self) -> None:
        self.service.forget(self.user)
        self.stored = {"user": [], "memory": []}

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def storage_equals_the_model(self) -> None:
        assert as_state(self.service.read(self.user)) == self.stored
        # Characters, not bytes: MariaDB's LENGTH counts bytes (the delimiter's § is two).
        length = func.length if self.engine.dialect.name == "sqlite" else func.char_length
        with self.engine.connect() as connection:
            rows = connection.execute(
                select(agent_memory.c.memory_type, length(agent_memory.c.content)).where(
                    agent_memory.c.user_id == self.user
                )
            ).all()
        # An emptied document has no row; a stored document is never longer than its limit.
        assert {kind for kind, _length in rows} == {t for t, v in self.stored.items() if v}
        assert all(length <= LIMITS[kind] for kind, length in rows)


def run_machine(engine: Engine, examples: int) -> None:
    machine: Callable[[], Any] = type("Machine", (MemoryMachine,), {"engine": engine})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def test_ledger_and_repository_agree_with_the_model_on_sqlite(sqlite_url: str) -> None:
    """On SQLite: stored memory always equals the model of the rules, whatever mix of staging,
    commits, discards, cancellations, concurrent writers and hostile content ran before."""
    engine = migrated_engine(sqlite_url)
    try:
        run_machine(engine, examples=40)
    finally:
        engine.dispose()


def test_ledger_and_repository_agree_with_the_model_on_the_servers(server_url: str) -> None:
    """The same machine on PostgreSQL (serializable transaction, row locks, advisory queue) and
    on MariaDB (serializable transaction, row locks)."""
    engine = migrated_engine(server_url)
    try:
        run_machine(engine, examples=25)
    finally:
        engine.dispose()
