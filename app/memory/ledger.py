"""The request-local staging ledger: the memory tool edits this, never the database."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from app.memory.rules import Change, Operation, Snapshot, pin, resolve_operations

Batch = tuple[Operation, ...]


@dataclass
class MemoryLedger:
    """Staged state for one turn. Each tool call is kept as its own batch so that the commit
    replays exactly what was validated, batch by batch, on the latest stored snapshot.

    Staged batches are pinned: each replace or remove names the whole entry its `match` found
    in the snapshot the model saw, so a commit can only ever touch that entry."""

    snapshot: Snapshot
    batches: list[Batch] = field(default_factory=list)

    @property
    def operations(self) -> list[Operation]:
        return [operation for batch in self.batches for operation in batch]

    @property
    def staged(self) -> bool:
        return bool(self.batches)


def stage_operations(ledger: MemoryLedger, operations: Sequence[Operation]) -> Snapshot:
    """Validate a batch against the staged state; a rejected batch leaves the ledger untouched."""
    updated, changes = resolve_operations(ledger.snapshot, operations)
    ledger.snapshot = updated
    ledger.batches.append(
        tuple(pin(op, change) for op, change in zip(operations, changes, strict=True))
    )
    return updated


def replay(snapshot: Snapshot, batches: Sequence[Sequence[Operation]]) -> Snapshot:
    """Re-apply staged batches, in order, to a (newer) snapshot."""
    return replay_changes(snapshot, batches)[0]


def replay_changes(
    snapshot: Snapshot, batches: Sequence[Sequence[Operation]]
) -> tuple[Snapshot, tuple[Change, ...]]:
    """`replay`, also saying what each operation did (the history records it)."""
    changes: list[Change] = []
    for batch in batches:
        snapshot, done = resolve_operations(snapshot, batch)
        changes.extend(done)
    return snapshot, tuple(changes)
