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
    # The remove is kept pinned to the whole entry its match found, not to the substring.
    pinned_remove = Operation("user", "remove", match="The user likes tea.", pinned=True)
    assert ledger.batches == [(ADD_TEA,), (ADD_CI, pinned_remove)]
    assert ledger.operations == [ADD_TEA, ADD_CI, pinned_remove]
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


def test_a_staged_edit_keeps_the_entry_it_saw_when_its_match_became_ambiguous() -> None:
    """Another writer added an entry that the substring also matches: the staged edit still
    resolves to the entry the model saw, never to the newcomer, and never fails for it."""
    ledger = MemoryLedger(snapshot=Snapshot(user=("The user likes tea.",)))
    stage_operations(ledger, [Operation("user", "remove", match="likes")])
    newer = Snapshot(user=("The user likes tea.", "The user likes jazz."))
    assert replay(newer, ledger.batches).user == ("The user likes jazz.",)


def test_a_staged_edit_never_lands_on_an_entry_the_model_did_not_see() -> None:
    """Staged `replace match="tea"` against "The user likes tea."; meanwhile another writer
    turned that entry into coffee and added a tea-ceremony entry. The substring would now hit
    the newcomer; the pinned edit refuses the whole batch as stale instead."""
    ledger = MemoryLedger(snapshot=Snapshot(user=("The user likes tea.",)))
    stage_operations(
        ledger,
        [
            Operation("memory", "add", content="Staged next to the edit."),
            Operation("user", "replace", match="tea", content="The user likes green tea."),
        ],
    )
    newer = Snapshot(user=("The user likes coffee.", "The user is a tea ceremony teacher."))
    with pytest.raises(MemoryValidationError) as caught:
        replay(newer, ledger.batches)
    assert caught.value.code == "stale_match"


@pytest.mark.parametrize("action", ["replace", "remove"])
def test_a_staged_edit_whose_entry_is_gone_is_stale(action: str) -> None:
    """The entry an edit was staged against was removed meanwhile: stale, nothing applied."""
    ledger = MemoryLedger(snapshot=Snapshot(memory=("Deploys run on Fridays.",)))
    content = "Deploys run on Mondays." if action == "replace" else None
    stage_operations(
        ledger,
        [
            Operation(
                "memory",
                action,
                match="Fridays",  # type: ignore[arg-type]
                content=content,
            )
        ],
    )
    with pytest.raises(MemoryValidationError) as caught:
        replay(Snapshot(memory=("Another fact.",)), ledger.batches)
    assert caught.value.code == "stale_match"


def test_an_edit_of_an_entry_staged_earlier_in_the_turn_replays() -> None:
    """A turn may add an entry and then edit it: the pin names the entry the turn itself added,
    which the replay re-creates first."""
    ledger = MemoryLedger(snapshot=Snapshot())
    stage_operations(ledger, [Operation("memory", "add", content="Draft fact.")])
    stage_operations(ledger, [Operation("memory", "replace", match="Draft", content="Final fact.")])
    newer = Snapshot(memory=("Other writer's fact.",))
    assert replay(newer, ledger.batches).memory == ("Other writer's fact.", "Final fact.")
