"""What a committed change records about itself, as pure data: where it came from, what each
operation did, the inverse an undo applies and the JSON forms stored in the history and
proposal tables. Nothing here touches storage."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

from app.memory.rules import TARGETS, Change, MemoryValidationError, Operation

# `expired`: entries that left memory at their time (remember-until, app/memory/until.py).
# `sources`: an entry the person removed with "Wrong" under an answer (app/agent/sources.py).
Source = Literal["turn", "api", "undo", "proposal", "mcp", "expired", "sources"]
# Who proposed a proposal: a turn under `ask`, an MCP client under `ask`, or an import.
Proposer = Literal["turn", "mcp", "import"]
SaveMode = Literal["auto", "ask"]
SOURCES: tuple[Source, ...] = get_args(Source)
PROPOSERS: tuple[Proposer, ...] = get_args(Proposer)
SAVE_MODES: tuple[SaveMode, ...] = get_args(SaveMode)
MAX_CLIENT_CHARS = 64  # the stored client name (app/db/schema.py CLIENT_CHARS)

Batches = Sequence[Sequence[Operation]]


@dataclass(frozen=True)
class Provenance:
    """Where a change comes from. `undoes` names the change an undo reverses; `client` is the
    MCP client's name (for `mcp`, and for a proposal an MCP client made)."""

    source: Source
    turn_id: str | None = None
    conversation_id: str | None = None
    undoes: str | None = None
    client: str | None = None

    @property
    def proposer(self) -> Proposer:
        return "mcp" if self.source == "mcp" else "turn"


def clip_client(name: object) -> str | None:
    """An MCP client's self-declared name as it may be stored and shown: printable characters
    only (no control, format or separator characters but the space), outer spaces removed, at
    most MAX_CLIENT_CHARS; None when nothing is left. It is a label the client chose, never an
    identity: the owner is always the token's subject."""
    if not isinstance(name, str):
        return None
    kept = "".join(c for c in name if c == " " or c.isprintable()).strip()
    return kept[:MAX_CLIENT_CHARS] or None


@dataclass(frozen=True)
class HistoryEntry:
    id: str
    created_at: datetime
    provenance: Provenance
    changes: tuple[Change, ...]
    project_id: str | None = None  # the project whose scope it was made in


@dataclass(frozen=True)
class Proposal:
    id: str
    created_at: datetime
    expires_at: datetime
    turn_id: str | None
    conversation_id: str | None
    batches: tuple[tuple[Operation, ...], ...]
    proposer: Proposer = "turn"
    client: str | None = None
    project_id: str | None = None  # the project whose scope it was staged in

    @property
    def operations(self) -> tuple[Operation, ...]:
        return tuple(operation for batch in self.batches for operation in batch)


# -- undo ----------------------------------------------------------------------------------


def inverse(changes: Sequence[Change], *, restore_until: bool = True) -> tuple[Operation, ...]:
    """The operations that reverse `changes`, last change first, each pinned to the exact entry
    that change produced: if that entry has changed or gone since, the undo is stale. Each entry
    gets its previous expiry back, unless `restore_until` is False (undoing an expiry: the
    entry comes back to stay)."""
    operations: list[Operation] = []
    for change in reversed(changes):
        if not change.changed:
            continue
        until = change.until_before if restore_until else None
        if change.before is None:  # an add: remove exactly what it added
            operations.append(Operation(change.target, "remove", match=change.after, pinned=True))
        elif change.after is None:  # a remove: bring the entry back
            operations.append(
                Operation(change.target, "add", content=change.before, until=until, sets_until=True)
            )
        else:  # a replace: put the previous entry back in place of the one it wrote
            operations.append(
                Operation(
                    change.target,
                    "replace",
                    match=change.after,
                    content=change.before,
                    pinned=True,
                    until=until,
                    sets_until=True,
                )
            )
    return tuple(operations)


def stale_undo() -> MemoryValidationError:
    return MemoryValidationError(
        "Memory has changed since this change was made (or it was undone already): "
        "nothing was changed.",
        code="stale_undo",
    )


# -- stored JSON ---------------------------------------------------------------------------


def _moment(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _read_moment(value: object) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def changes_to_json(changes: Sequence[Change]) -> str:
    items: list[dict[str, Any]] = []
    for c in changes:
        item: dict[str, Any] = {
            "target": c.target,
            "action": c.action,
            "before": c.before,
            "after": c.after,
        }
        # Only when an expiry is involved: rows without one read as before revision 0017.
        if c.until_before is not None:
            item["until_before"] = _moment(c.until_before)
        if c.until_after is not None:
            item["until_after"] = _moment(c.until_after)
        items.append(item)
    return json.dumps(items, ensure_ascii=False)


def changes_from_json(text: str) -> tuple[Change, ...]:
    return tuple(
        Change(
            item["target"],
            item["action"],
            item.get("before"),
            item.get("after"),
            _read_moment(item.get("until_before")),
            _read_moment(item.get("until_after")),
        )
        for item in json.loads(text)
        if item.get("target") in TARGETS
    )


def batches_to_json(batches: Batches) -> str:
    return json.dumps(
        [
            [
                {
                    "target": o.target,
                    "action": o.action,
                    "match": o.match,
                    "content": o.content,
                    "pinned": o.pinned,
                    **({"until": _moment(o.until)} if o.sets_until else {}),
                }
                for o in batch
            ]
            for batch in batches
        ],
        ensure_ascii=False,
    )


def batches_from_json(text: str) -> tuple[tuple[Operation, ...], ...]:
    return tuple(
        tuple(
            Operation(
                item["target"],
                item["action"],
                item.get("match"),
                item.get("content"),
                pinned=bool(item.get("pinned")),
                until=_read_moment(item.get("until")),
                sets_until="until" in item,
            )
            for item in batch
        )
        for batch in json.loads(text)
    )


# -- the API's shapes ----------------------------------------------------------------------


def utc_text(moment: datetime) -> str:
    """A stored naive-UTC moment as the API writes timestamps (`...Z`)."""
    return moment.replace(tzinfo=None).isoformat() + "Z"


def change_view(change: Change) -> dict[str, Any]:
    view: dict[str, Any] = {"target": change.target, "action": change.action}
    if change.before is not None:
        view["before"] = change.before
    if change.after is not None:
        view["after"] = change.after
    if change.until_before is not None:
        view["until_before"] = utc_text(change.until_before)
    if change.until_after is not None:
        view["until_after"] = utc_text(change.until_after)
    return view


def operation_view(operation: Operation) -> dict[str, Any]:
    view: dict[str, Any] = {"target": operation.target, "action": operation.action}
    if operation.match is not None:
        view["match"] = operation.match
    if operation.content is not None:
        view["content"] = operation.content
    if operation.sets_until:
        view["until"] = utc_text(operation.until) if operation.until is not None else None
    return view


def entry_strings(entry: HistoryEntry) -> list[str]:
    """The memory content an entry carries (for telemetry redaction)."""
    return [text for c in entry.changes for text in (c.before, c.after) if text]


def proposal_strings(proposal: Proposal) -> list[str]:
    return [text for o in proposal.operations for text in (o.match, o.content) if text]
