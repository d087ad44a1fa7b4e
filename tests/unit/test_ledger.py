"""The staging ledger: validated batches are kept in order; a rejected batch leaves no trace."""

from __future__ import annotations

import pytest

from app.memory.ledger import MemoryLedger, replay, stage_operations
from app.memory.rules import LIMITS, MemoryValidationError, Operation, Snapshot

ADD_TEA = Operation("user", "add", content="The user likes tea.")
ADD_CI = Operation("memory", "add", content="CI runs on GitHub Actions.")


def test_staging_updates_the_snapshot_and_keeps_the_batch() -> None:
    """Each stage call is one batch; the ledger's snapshot is the result of all of them."""
    ledger = MemoryLedger(snapshot=Snapshot())
    assert not ledger.staged
    stage_operations(ledger, [ADD_TEA])
    result = stage_operations(ledger, [ADD_CI, Operation("user", "remove", match="tea")])
    assert result == ledger.snapshot == Snapshot(memory=("CI runs on GitHub Actions.",))
    assert ledger.batches == [(ADD_TEA,), (ADD_CI, Operation("user", "remove", match="tea"))]
    assert ledger.operations == [ADD_TEA, ADD_CI, Operation("user", "remove", match="tea")]
    assert ledger.staged


def test_rejected_batch_leaves_the_ledger_untouched() -> None:
    """A batch that fails validation neither changes the staged snapshot nor is recorded."""
    ledger = MemoryLedger(snapshot=Snapshot(user=("The user likes tea.",)))
    stage_operations(ledger, [ADD_CI])
    before_snapshot, before_batches = ledger.snapshot, list(ledger.batches)
    with pytest.raises(MemoryValidationError):
        stage_operations(
            ledger,
            [
                Operation("memory", "add", content="fine"),
                Operation("user", "remove", match="coffee"),
            ],
        )
    assert ledger.snapshot == before_snapshot
    assert ledger.batches == before_batches


def test_staged_batches_cannot_be_mutated_through_the_caller_list() -> None:
    """The ledger keeps its own tuple of each batch: editing the caller's list changes nothing."""
    ledger = MemoryLedger(snapshot=Snapshot())
    operations = [ADD_TEA]
    stage_operations(ledger, operations)
    operations.append(ADD_CI)
    assert ledger.batches == [(ADD_TEA,)]


def test_replay_on_the_staging_snapshot_reproduces_the_staged_result() -> None:
    """Replaying every batch on the snapshot the turn started from gives the staged snapshot."""
    start = Snapshot(user=("The user likes tea.",))
    ledger = MemoryLedger(snapshot=start)
    stage_operations(
        ledger, [Operation("user", "replace", match="tea", content="The user likes coffee.")]
    )
    stage_operations(ledger, [ADD_CI])
    assert replay(start, ledger.batches) == ledger.snapshot


def test_replay_on_a_newer_snapshot_keeps_the_other_writer_facts() -> None:
    """The commit applies staged batches to the latest stored state, so a concurrent writer's
    fact survives next to ours (no lost update)."""
    ledger = MemoryLedger(snapshot=Snapshot())
    stage_operations(ledger, [ADD_TEA])
    newer = Snapshot(user=("Written by another request.",))
    assert replay(newer, ledger.batches).user == (
        "Written by another request.",
        "The user likes tea.",
    )


def test_replay_checks_capacity_after_each_batch_exactly_as_staged() -> None:
    """Batches are replayed one by one: a batch that would overflow on the newer snapshot fails
    even if a later batch would free room, because staging validated them separately."""
    big = "x" * (LIMITS["memory"] - 100)
    ledger = MemoryLedger(snapshot=Snapshot())
    stage_operations(ledger, [Operation("memory", "add", content=big)])
    stage_operations(ledger, [Operation("memory", "remove", match="xxx")])
    assert ledger.snapshot == Snapshot()
    newer = Snapshot(memory=("y" * 200,))
    with pytest.raises(MemoryValidationError) as caught:
        replay(newer, ledger.batches)
    assert caught.value.code == "capacity_exceeded"


def test_replay_fails_when_the_newer_snapshot_makes_a_match_ambiguous() -> None:
    """A staged edit that no longer identifies exactly one entry is rejected, never guessed."""
    ledger = MemoryLedger(snapshot=Snapshot(user=("The user likes tea.",)))
    stage_operations(ledger, [Operation("user", "remove", match="likes")])
    newer = Snapshot(user=("The user likes tea.", "The user likes jazz."))
    with pytest.raises(MemoryValidationError) as caught:
        replay(newer, ledger.batches)
    assert caught.value.code == "match_ambiguous"
