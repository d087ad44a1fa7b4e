"""The sources of one answer: the memory entries its prompt held, the earlier-conversation
snippets it was given (by the conversation_search tool or by recall) and the memory changes it
committed or proposed. Collected on the turn's context as the turn runs, sent as the `sources`
event before `done` and stored with the answer (`amem_conversation_messages.sources`), so that a
reload shows them. They are user content: never logged, never on a span.

Each list holds exactly what the model was given: an entry the content policy withheld from the
prompt is not a source, nor is a search result the tool's size bound left out of its answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from app.memory.render import SECTION_ORDER, Withheld, prompt_entries
from app.memory.rules import Operation, Snapshot, Target

Via = Literal["search", "recall"]
ChangeOutcome = Literal["committed", "proposed"]


@dataclass(frozen=True)
class MemorySource:
    """One entry the prompt held; `project_id` names the project of a `project` entry."""

    target: Target
    text: str
    project_id: str | None = None

    def data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"target": self.target, "text": self.text}
        if self.target == "project":
            data["project_id"] = self.project_id
        return data


@dataclass(frozen=True)
class ConversationSource:
    """One earlier message's snippet as the model read it; `title` is its conversation's (for
    the person's list), `via` how it came: the search tool or recall."""

    conversation_id: str
    message_id: int
    snippet: str
    title: str
    via: Via

    def data(self) -> dict[str, Any]:
        return {
            "conversation_id": self.conversation_id,
            "message_id": self.message_id,
            "snippet": self.snippet,
            "title": self.title,
            "via": self.via,
        }


@dataclass(frozen=True)
class ChangeSource:
    """One memory change of the turn: `text` is the entry added or written, or the one removed."""

    target: Target
    action: str
    text: str
    outcome: ChangeOutcome

    def data(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "action": self.action,
            "text": self.text,
            "outcome": self.outcome,
        }


@dataclass(frozen=True)
class MemoryUpdate:
    """What became of the edits the turn's memory tool staged: the outcome and reason of its
    `memory` event (`none`: they changed nothing, the facts were already remembered). Kept with
    the answer, so that a reload labels its memory chip as the live turn did."""

    outcome: str
    reason: str | None = None

    def data(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "reason": self.reason}


@dataclass
class TurnSources:
    """What one turn was given and did; filled as the turn runs (request-local, never shared).
    `memory_update` is set only when the memory tool staged edits."""

    memory: list[MemorySource] = field(default_factory=list)
    conversations: list[ConversationSource] = field(default_factory=list)
    changes: list[ChangeSource] = field(default_factory=list)
    memory_update: MemoryUpdate | None = None

    def given(self, snippets: Iterable[ConversationSource]) -> None:
        """Snippets the model was given; a message given twice (recall, then search) is listed
        once, as it first came."""
        seen = {source.message_id for source in self.conversations}
        for source in snippets:
            if source.message_id not in seen:
                seen.add(source.message_id)
                self.conversations.append(source)

    def data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "memory": [source.data() for source in self.memory],
            "conversations": [source.data() for source in self.conversations],
            "changes": [source.data() for source in self.changes],
        }
        if self.memory_update is not None:
            data["memory_update"] = self.memory_update.data()
        return data

    def to_json(self) -> str:
        return json.dumps(self.data(), ensure_ascii=False, separators=(",", ":"))


def prompt_sources(
    snapshot: Snapshot, withheld: Withheld, project_id: str | None
) -> list[MemorySource]:
    """The entries the memory block shows (app/memory/render.py `render_block`), in its order:
    every store of the snapshot's scope, a withheld entry left out (the model never saw it)."""
    return [
        MemorySource(target, entry, project_id if target == "project" else None)
        for target in SECTION_ORDER
        if target in snapshot.targets
        for entry in prompt_entries(snapshot, target, withheld)
        if entry is not None
    ]


def change_sources(operations: Sequence[Operation], outcome: ChangeOutcome) -> list[ChangeSource]:
    """A committed or proposed batch, from its staged operations: they are pinned, so a
    replace's or remove's `match` is the whole entry it touched."""
    return [
        ChangeSource(
            operation.target,
            operation.action,
            (operation.match if operation.action == "remove" else operation.content) or "",
            outcome,
        )
        for operation in operations
    ]


def stored_sources(raw: str | None) -> dict[str, Any] | None:
    """The stored JSON as the API returns it (None: the answer has none)."""
    if raw is None:
        return None
    value = json.loads(raw)
    return value if isinstance(value, dict) else None
