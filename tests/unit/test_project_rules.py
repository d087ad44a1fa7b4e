"""The `project` target in the pure rules: a scope's targets are the only documents an operation
may name, the project document has its own bound, and a batch that names a target outside its
scope changes nothing of any document."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.memory.ledger import MemoryLedger, stage_operations
from app.memory.rules import (
    GENERAL_TARGETS,
    LIMITS,
    TARGETS,
    MemoryValidationError,
    Operation,
    Snapshot,
    Target,
    apply_operations,
    scope_targets,
)

IN_PROJECT = Snapshot(
    user=("Name: Ada.",),
    project=("Client A invoices monthly.",),
    targets=scope_targets(in_project=True, general_memory=False, owner=False),
)


@pytest.mark.parametrize(
    ("in_project", "general_memory", "owner", "targets"),
    [
        pytest.param(False, False, False, ("user", "memory"), id="general-model"),
        pytest.param(False, True, True, ("user", "memory"), id="general-owner"),
        pytest.param(True, False, False, ("user", "project"), id="project-model"),
        pytest.param(True, True, False, ("user", "memory", "project"), id="opted-in-model"),
        pytest.param(True, False, True, ("user", "memory", "project"), id="project-owner"),
    ],
)
def test_scope_targets(
    in_project: bool, general_memory: bool, owner: bool, targets: tuple[Target, ...]
) -> None:
    """Outside projects nothing changes; the model in a project reaches `memory` only when the
    project is opted into it; the person reaches every document of the scope."""
    assert (
        scope_targets(in_project=in_project, general_memory=general_memory, owner=owner) == targets
    )


@pytest.mark.parametrize(
    ("snapshot", "target"),
    [
        pytest.param(Snapshot(), "project", id="project-outside-projects"),
        pytest.param(IN_PROJECT, "memory", id="memory-in-a-project-not-opted-in"),
    ],
)
def test_a_target_outside_the_scope_is_refused(snapshot: Snapshot, target: Target) -> None:
    """Naming a document the scope does not reach is an invalid operation, in any action."""
    for operation in (
        Operation(target, "add", content="A fact."),
        Operation(target, "replace", match="Client", content="A fact."),
        Operation(target, "remove", match="Client"),
    ):
        with pytest.raises(MemoryValidationError, match="not reachable") as raised:
            apply_operations(snapshot, [operation])
        assert raised.value.code == "invalid_operation"


def test_the_project_document_has_its_own_bound() -> None:
    """PROJECT_MEMORY_CHARS: the snapshot's bound, not the general document's."""
    small = Snapshot(targets=("user", "project"), project_limit=40)
    fits = apply_operations(small, [Operation("project", "add", content="x" * 40)])
    assert fits.project == ("x" * 40,) and fits.usage().project == 40
    with pytest.raises(MemoryValidationError) as raised:
        apply_operations(small, [Operation("project", "add", content="x" * 41)])
    assert raised.value.code == "capacity_exceeded"
    large = Snapshot(targets=("user", "project"), project_limit=5_000)
    entry = "y" * 4_000  # longer than any general document could hold
    assert apply_operations(large, [Operation("project", "add", content=entry)]).project == (entry,)
    assert LIMITS["project"] == 2_200


def test_usage_reports_the_project_only_inside_a_project() -> None:
    """Outside projects the counts keep their shape; inside, they add the project's."""
    assert set(Snapshot().usage().with_limits()) == {
        "user_characters",
        "user_limit",
        "memory_characters",
        "memory_limit",
    }
    assert IN_PROJECT.usage().with_limits()["project_characters"] == len(IN_PROJECT.project[0])
    assert IN_PROJECT.usage().counts()["project_characters"] == len(IN_PROJECT.project[0])


operations = st.builds(
    Operation,
    target=st.sampled_from(TARGETS),
    action=st.just("add"),
    content=st.text(alphabet="abcdefgh ", min_size=1, max_size=40).filter(str.strip),
)


@settings(max_examples=200, deadline=None)
@given(
    batch=st.lists(operations, min_size=1, max_size=6),
    general_memory=st.booleans(),
    in_project=st.booleans(),
)
def test_a_batch_never_reaches_outside_its_scope(
    batch: list[Operation], general_memory: bool, in_project: bool
) -> None:
    """For any batch and scope: the batch is staged only when every operation names one of the
    scope's targets, and a document outside the scope is never changed (a refused batch leaves
    the ledger as it was)."""
    targets = scope_targets(in_project=in_project, general_memory=general_memory, owner=False)
    before = Snapshot(
        user=("Name: Ada.",),
        memory=("General fact.",) if "memory" in targets else (),
        project=("Project fact.",) if in_project else (),
        targets=targets,
    )
    ledger = MemoryLedger(before)
    try:
        after = stage_operations(ledger, batch)
    except MemoryValidationError:
        assert ledger.snapshot == before and not ledger.batches
        return
    assert all(operation.target in targets for operation in batch)
    for target in TARGETS:
        if target not in targets:
            assert after.entries(target) == before.entries(target)
    assert after.targets == targets


def test_general_targets_are_unchanged() -> None:
    assert GENERAL_TARGETS == ("user", "memory") and Snapshot().targets == GENERAL_TARGETS
