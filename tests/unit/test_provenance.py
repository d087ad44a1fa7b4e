"""The pure core of memory history: the inverse an undo applies, and the stored JSON forms."""

from __future__ import annotations

import pytest

from app.memory.ledger import replay_changes
from app.memory.provenance import (
    batches_from_json,
    batches_to_json,
    changes_from_json,
    changes_to_json,
    inverse,
)
from app.memory.rules import MemoryValidationError, Operation, Snapshot


def test_applying_the_inverse_restores_the_snapshot_before_the_change() -> None:
    """For a batch of add, replace and remove (with a no-op add), replaying the inverse on the
    result gives back exactly the snapshot before the batch, order of entries aside."""
    before = Snapshot(user=("Prefers tea.", "Works in UTC."), memory=("Uses Postgres.",))
    batch = [
        Operation("user", "add", content="Likes jazz."),
        Operation("user", "replace", match="tea", content="Prefers coffee."),
        Operation("memory", "remove", match="Postgres"),
        Operation("user", "add", content="Works in UTC."),  # already there: no change
    ]
    after, changes = replay_changes(before, [batch])
    undo = inverse(changes)
    assert [op.action for op in undo] == ["add", "replace", "remove"]  # last change first
    restored, _ = replay_changes(after, [undo])
    assert sorted(restored.user) == sorted(before.user)
    assert restored.memory == before.memory


def test_the_inverse_is_pinned_to_the_entries_the_change_produced() -> None:
    """An entry the change wrote, edited since, makes the inverse stale; a substring that would
    match it is not enough."""
    _, changes = replay_changes(Snapshot(), [[Operation("user", "add", content="Prefers tea.")]])
    edited = Snapshot(user=("Prefers tea with milk.",))
    with pytest.raises(MemoryValidationError) as stale:
        replay_changes(edited, [inverse(changes)])
    assert stale.value.code == "stale_match"


def test_stored_forms_round_trip() -> None:
    _, changes = replay_changes(
        Snapshot(user=("Prefers tea.",)),
        [[Operation("user", "replace", match="tea", content="Prefers «café» ☕.")]],
    )
    assert changes_from_json(changes_to_json(changes)) == changes
    batches = (
        (Operation("user", "remove", match="Prefers tea.", pinned=True),),
        (Operation("memory", "add", content="Uses Postgres."),),
    )
    assert batches_from_json(batches_to_json(batches)) == batches
