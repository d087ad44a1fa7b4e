"""The memory state machine: pure validation and application of ordered edit batches.

Nothing here touches storage, the network or logging; the service and the tool both call
`apply_operations`, so the rules hold the same way for the model and for the user.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal, get_args

from app.policy import content as policy

Target = Literal["user", "memory", "project"]
Action = Literal["add", "replace", "remove"]

TARGETS: tuple[Target, ...] = get_args(Target)
# The documents outside projects (and the two rows a user may have in agent_memory).
GENERAL_TARGETS: tuple[Target, ...] = ("user", "memory")
ACTIONS: tuple[Action, ...] = get_args(Action)
# `project` is the default of PROJECT_MEMORY_CHARS; a snapshot carries the bound in force.
LIMITS: dict[str, int] = {"user": 1_375, "memory": 2_200, "project": 2_200}
SEPARATOR = "\n§\n"
MAX_ENTRY_CHARS = max(LIMITS["user"], LIMITS["memory"])
SCHEMA_VERSION = 1
MAX_OPERATIONS = 20

ErrorCode = Literal[
    "invalid_operation",
    "match_not_found",
    "match_ambiguous",
    "stale_match",
    "stale_undo",
    "duplicate_entry",
    "forbidden_content",
    "unsafe_content",
    "capacity_exceeded",
    "invalid_until",
]

# When an entry expires (remember-until): its target, its text and the moment (naive UTC).
Expiry = tuple[Target, str, datetime]


class MemoryValidationError(ValueError):
    """A proposed edit breaks a rule; the message is written for the model that will read it."""

    def __init__(self, message: str, *, code: ErrorCode = "invalid_operation") -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message


@dataclass(frozen=True)
class MemoryUsage:
    """Characters used in each store, counted as the capacity check counts them (delimiters
    included): the one shape of the counts the API, the tool, events and telemetry report.
    `project` is None outside projects, and then no project count is reported at all."""

    user: int = 0
    memory: int = 0
    project: int | None = None
    project_limit: int = LIMITS["project"]

    def counts(self) -> dict[str, int]:
        counts = {"user_characters": self.user, "memory_characters": self.memory}
        if self.project is not None:
            counts["project_characters"] = self.project
        return counts

    def with_limits(self) -> dict[str, int]:
        limits = {
            "user_characters": self.user,
            "user_limit": LIMITS["user"],
            "memory_characters": self.memory,
            "memory_limit": LIMITS["memory"],
        }
        if self.project is not None:
            limits["project_characters"] = self.project
            limits["project_limit"] = self.project_limit
        return limits


def scope_targets(*, in_project: bool, general_memory: bool, owner: bool) -> tuple[Target, ...]:
    """The targets a scope reaches. Outside projects: `user` and `memory`. In a project, the
    person themself (REST, their own import) reaches all three documents; the model (a turn, an
    MCP client) reaches `user` and `project`, and `memory` only in a project opted into it."""
    if not in_project:
        return GENERAL_TARGETS
    if owner or general_memory:
        return ("user", "memory", "project")
    return ("user", "project")


@dataclass(frozen=True)
class Snapshot:
    """The documents one scope sees. `targets` are the documents that scope may edit (a document
    outside them is empty here and no operation may name it); `project_limit` is the project
    document's bound (PROJECT_MEMORY_CHARS)."""

    user: tuple[str, ...] = ()
    memory: tuple[str, ...] = ()
    project: tuple[str, ...] = ()
    targets: tuple[Target, ...] = GENERAL_TARGETS
    project_limit: int = LIMITS["project"]
    # The entries that expire and when (remember-until); beside the documents, never in them:
    # an expiry takes no characters.
    expiries: frozenset[Expiry] = frozenset()

    def entries(self, target: Target) -> tuple[str, ...]:
        if target == "user":
            return self.user
        return self.project if target == "project" else self.memory

    def characters(self, target: Target) -> int:
        return rendered_length(self.entries(target))

    def limit(self, target: Target) -> int:
        return self.project_limit if target == "project" else LIMITS[target]

    @property
    def in_project(self) -> bool:
        return "project" in self.targets

    def expiry(self, target: Target, entry: str) -> datetime | None:
        """When `entry` of `target` expires (None: it stays until removed)."""
        for where, text, at in self.expiries:
            if where == target and text == entry:
                return at
        return None

    def usage(self) -> MemoryUsage:
        project = self.characters("project") if self.in_project else None
        return MemoryUsage(
            self.characters("user"), self.characters("memory"), project, self.project_limit
        )


@dataclass(frozen=True)
class Operation:
    """One edit. `pinned` operations come from a staged batch: their `match` is the whole entry
    the model's edit resolved to when it was staged, and they apply to that entry only.
    `sets_until`: the operation names an expiry for the entry it writes (`until`, None to clear
    it); otherwise an add has none and a replace keeps the replaced entry's."""

    target: Target
    action: Action
    match: str | None = None
    content: str | None = None
    pinned: bool = False
    until: datetime | None = None
    sets_until: bool = False


@dataclass(frozen=True)
class Change:
    """What one applied operation did: the entry it matched (`before`) and the entry it wrote
    (`after`). An add of an entry already present has neither: it changed nothing.
    `until_before` and `until_after`: the entry's expiry before and after."""

    target: Target
    action: Action
    before: str | None
    after: str | None
    until_before: datetime | None = None
    until_after: datetime | None = None

    @property
    def changed(self) -> bool:
        return self.before != self.after or self.until_before != self.until_after


def rendered_length(entries: Sequence[str]) -> int:
    """Characters of the stored document: entries joined by the separator, delimiters counted."""
    return len(SEPARATOR.join(entries))


# -- normalization ------------------------------------------------------------------------


def normalize_text(text: str) -> str:
    """Line endings to LF, NFC, outer whitespace removed (the content policy's normal form)."""
    return policy.normalize(text)


def normalize_entry(content: str | None, limit: int = MAX_ENTRY_CHARS) -> str:
    """The entry as it would be stored, or the reason it may not be: one content policy."""
    if content is None:
        raise MemoryValidationError("content is required for this action.")
    entry = normalize_text(content)
    if not entry:
        raise MemoryValidationError("The entry is empty: write the fact to remember.")
    if len(entry) > limit:
        # It could never fit in its store; refused before the policy scans all of it.
        raise MemoryValidationError(
            f"The entry holds {len(entry):,} characters; a store holds at most "
            f"{limit:,}. Shorten it.",
            code="capacity_exceeded",
        )
    violation = policy.check(entry)
    if violation is not None:
        raise MemoryValidationError(violation.message, code=violation.code)
    return entry


def normalize_match(match: str | None) -> str:
    if match is None:
        raise MemoryValidationError("match is required for replace and remove.")
    text = normalize_text(match)
    if not text:
        raise MemoryValidationError("match must not be empty: quote part of the entry to change.")
    return text


# -- operation contract --------------------------------------------------------------------


def _quoted(targets: Sequence[Target]) -> str:
    names = [repr(target) for target in targets]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def check_fields(operation: Operation, targets: Sequence[Target] = GENERAL_TARGETS) -> None:
    """The target is one of the scope's; add needs content and no match; replace needs both;
    remove needs match and no content."""
    if operation.target not in TARGETS:
        raise MemoryValidationError(f"Unknown target {operation.target!r}: use {_quoted(targets)}.")
    if operation.target not in targets:
        raise MemoryValidationError(
            f"The target {operation.target!r} is not reachable in this conversation: "
            f"use {_quoted(targets)}."
        )
    if operation.action not in ACTIONS:
        raise MemoryValidationError(
            f"Unknown action {operation.action!r}: use 'add', 'replace' or 'remove'."
        )
    needs_match = operation.action in ("replace", "remove")
    needs_content = operation.action in ("add", "replace")
    if needs_match and operation.match is None:
        raise MemoryValidationError(f"{operation.action} requires match.")
    if not needs_match and operation.match is not None:
        raise MemoryValidationError("add forbids match: use replace to change an entry.")
    if needs_content and operation.content is None:
        raise MemoryValidationError(f"{operation.action} requires content (the complete entry).")
    if not needs_content and operation.content is not None:
        raise MemoryValidationError("remove forbids content.")


def find_index(entries: Sequence[str], match: str) -> int:
    """The one entry `match` identifies: a whole-entry match wins, else a unique substring."""
    exact = [index for index, entry in enumerate(entries) if entry == match]
    if len(exact) == 1:
        return exact[0]
    found = [index for index, entry in enumerate(entries) if match in entry]
    if not found:
        raise MemoryValidationError(
            "The match identifies no entry: quote a substring of the entry exactly.",
            code="match_not_found",
        )
    if len(found) > 1:
        raise MemoryValidationError(
            f"The match identifies {len(found)} entries: quote a longer substring that "
            "appears in exactly one entry.",
            code="match_ambiguous",
        )
    return found[0]


def find_pinned(entries: Sequence[str], entry: str) -> int:
    """The index of exactly the entry a staged edit saw; gone or changed since is stale."""
    for index, candidate in enumerate(entries):
        if candidate == entry:
            return index
    raise MemoryValidationError(
        "The entry this edit was made against has changed or gone since it was staged.",
        code="stale_match",
    )


def _apply_one(
    entries: list[str], expiries: dict[str, datetime], operation: Operation, limit: int
) -> Change:
    """Apply one operation to a document's entries and their expiries (by entry text)."""
    if operation.action == "add":
        entry = normalize_entry(operation.content, max(limit, MAX_ENTRY_CHARS))
        if entry in entries:
            return Change(operation.target, "add", None, None)  # a retry or a known fact
        entries.append(entry)
        if operation.until is not None:
            expiries[entry] = operation.until
        return Change(operation.target, "add", None, entry, until_after=operation.until)
    if operation.pinned:
        index = find_pinned(entries, operation.match or "")
    else:
        index = find_index(entries, normalize_match(operation.match))
    before = entries[index]
    until_before = expiries.pop(before, None)
    if operation.action == "remove":
        del entries[index]
        return Change(operation.target, "remove", before, None, until_before=until_before)
    entry = normalize_entry(operation.content, max(limit, MAX_ENTRY_CHARS))
    if any(other == entry for position, other in enumerate(entries) if position != index):
        raise MemoryValidationError(
            "The replacement duplicates another entry: remove this entry instead.",
            code="duplicate_entry",
        )
    entries[index] = entry
    until_after = operation.until if operation.sets_until else until_before
    if until_after is not None:
        expiries[entry] = until_after
    return Change(operation.target, "replace", before, entry, until_before, until_after)


def validate_capacity(snapshot: Snapshot) -> None:
    for target in TARGETS:
        used, limit = snapshot.characters(target), snapshot.limit(target)
        if used > limit:
            raise MemoryValidationError(
                f"The {target} store would hold {used:,}/{limit:,} characters: "
                "remove or shorten entries in the same call.",
                code="capacity_exceeded",
            )


def resolve_operations(
    snapshot: Snapshot, operations: Sequence[Operation]
) -> tuple[Snapshot, tuple[Change, ...]]:
    """Apply an ordered batch and say what each operation did; each step sees the previous
    result; capacity is checked after the whole batch. Nothing is applied unless all of it is."""
    if not operations:
        raise MemoryValidationError("operations must hold at least one operation.")
    if len(operations) > MAX_OPERATIONS:
        raise MemoryValidationError(
            f"operations holds {len(operations)} items; at most {MAX_OPERATIONS} are allowed."
        )
    entries: dict[Target, list[str]] = {
        target: list(snapshot.entries(target)) for target in TARGETS
    }
    expiries: dict[Target, dict[str, datetime]] = {target: {} for target in TARGETS}
    for target, entry, at in snapshot.expiries:
        expiries[target][entry] = at
    changes: list[Change] = []
    for position, operation in enumerate(operations, start=1):
        try:
            check_fields(operation, snapshot.targets)
            limit = snapshot.limit(operation.target)
            changes.append(
                _apply_one(entries[operation.target], expiries[operation.target], operation, limit)
            )
        except MemoryValidationError as error:
            prefix = f"Operation {position} ({operation.action} on {operation.target}): "
            raise MemoryValidationError(prefix + error.message, code=error.code) from None
    updated = replace(
        snapshot,
        user=tuple(entries["user"]),
        memory=tuple(entries["memory"]),
        project=tuple(entries["project"]),
        expiries=frozenset(
            (target, entry, at)
            for target in TARGETS
            for entry, at in expiries[target].items()
            if entry in entries[target]
        ),
    )
    validate_capacity(updated)
    return updated, tuple(changes)


def apply_operations(snapshot: Snapshot, operations: Sequence[Operation]) -> Snapshot:
    """Apply an ordered batch; each step sees the previous result; capacity is checked last."""
    return resolve_operations(snapshot, operations)[0]


def pin(operation: Operation, change: Change) -> Operation:
    """The staged form of an operation: a replace or remove bound to the entry it matched."""
    if operation.action == "add":
        return operation
    return replace(operation, match=change.before, pinned=True)
