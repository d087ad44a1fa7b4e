"""Typed events of one chat turn; encoders (SSE, AI SDK UI stream) turn them into bytes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from app.memory.contract import MEMORY_TOOL_NAME
from app.memory.render import MemoryStatus
from app.memory.rules import MemoryUsage
from app.names import SEARCH_TOOL_NAME as SEARCH_TOOL_NAME

ToolOutcome = Literal["staged", "rejected", "unavailable", "found", "none"]
CommitOutcome = Literal["committed", "proposed", "none", "failed"]
FinishReason = Literal["stop", "length", "tool_limit"]
# Whether the turn's messages are being stored: `unavailable` is told in `start`, before any
# answer, when the user's message could not be stored (the turn still answers); `disabled` on
# the routes that store no transcript.
TranscriptStatus = Literal["stored", "unavailable", "disabled"]


@dataclass(frozen=True)
class StartEvent:
    conversation_id: str | None
    turn_id: str
    memory_status: MemoryStatus
    transcript_status: TranscriptStatus = "disabled"
    name: Literal["start"] = "start"

    def data(self) -> dict[str, Any]:
        return {
            "conversation_id": self.conversation_id,
            "turn_id": self.turn_id,
            "memory": {"status": self.memory_status},
            "transcript": {"status": self.transcript_status},
        }


@dataclass(frozen=True)
class DeltaEvent:
    text: str
    name: Literal["delta"] = "delta"

    def data(self) -> dict[str, Any]:
        return {"text": self.text}


@dataclass(frozen=True)
class ToolEvent:
    """After each tool call. Never carries content: the memory tool reports how many operations
    it received (`operation_count`), the search tool how many results it returned
    (`result_count`, see `search`)."""

    outcome: ToolOutcome
    operation_count: int
    tool_name: str = MEMORY_TOOL_NAME
    count_key: Literal["operation_count", "result_count"] = "operation_count"
    name: Literal["tool"] = "tool"

    @classmethod
    def search(cls, outcome: ToolOutcome, result_count: int) -> ToolEvent:
        return cls(outcome, result_count, SEARCH_TOOL_NAME, "result_count")

    def counts(self) -> dict[str, int]:
        return {self.count_key: self.operation_count}

    def data(self) -> dict[str, Any]:
        return {"name": self.tool_name, "outcome": self.outcome, **self.counts()}


@dataclass(frozen=True)
class MemoryEvent:
    """What became of the turn's staged edits; the counts are those of the stored memory, or
    None (sent as null) when memory could not be read: no count is then known, and zeros would
    claim an empty memory. `reason` (a stable code, never content) says why a staged batch was
    not committed."""

    outcome: CommitOutcome
    usage: MemoryUsage | None
    reason: str | None = None
    name: Literal["memory"] = "memory"

    def data(self) -> dict[str, Any]:
        counts = (
            self.usage.counts()
            if self.usage is not None
            else {"user_characters": None, "memory_characters": None}
        )
        data: dict[str, Any] = {"outcome": self.outcome, **counts}
        if self.reason is not None:
            data["reason"] = self.reason
        return data


@dataclass(frozen=True)
class SourcesEvent:
    """Before `done` on the authenticated chat route: what the answer was given and what it
    did (app/agent/sources.py). The one event that carries content, the person's own: the
    encoders put it on their stream, telemetry never reads it."""

    sources: dict[str, Any]
    name: Literal["sources"] = "sources"

    def data(self) -> dict[str, Any]:
        return self.sources


@dataclass(frozen=True)
class Usage:
    """Tokens the model reported; for a turn, the sum over its model rounds."""

    input_tokens: int
    output_tokens: int

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )


@dataclass(frozen=True)
class DoneEvent:
    """`usage` is None unless every model round of the turn reported it; adapters that have a
    place for it (chat completions) pass it on, the native event stream does not."""

    finish_reason: FinishReason
    usage: Usage | None = None
    name: Literal["done"] = "done"

    def data(self) -> dict[str, Any]:
        return {"finish_reason": self.finish_reason}


@dataclass(frozen=True)
class ErrorEvent:
    code: str
    message: str
    name: Literal["error"] = "error"

    def data(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


TurnEvent = (
    StartEvent | DeltaEvent | ToolEvent | MemoryEvent | SourcesEvent | DoneEvent | ErrorEvent
)
