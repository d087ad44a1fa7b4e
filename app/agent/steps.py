"""What one model round means for the loop, as data: answer, run tools, or stop at the limit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.agent.llm import RoundResult, ToolCallRequest


@dataclass(frozen=True)
class FinalOutput:
    """The model answered; `finish_reason` is "length" when it ran out of output tokens."""

    text: str
    finish_reason: Literal["stop", "length"]


@dataclass(frozen=True)
class RunTools:
    text: str
    calls: tuple[ToolCallRequest, ...]


@dataclass(frozen=True)
class ToolLimit:
    """The model still wanted tools after the last allowed round; its calls are not run."""

    text: str


RoundStep = FinalOutput | RunTools | ToolLimit


def next_step(result: RoundResult, round_number: int, max_rounds: int) -> RoundStep:
    """Classify a finished round. A truncated answer ends the turn even with half a tool call."""
    if result.finish_reason == "length":
        return FinalOutput(result.text, "length")
    if result.tool_calls:
        if round_number >= max_rounds:
            return ToolLimit(result.text)
        return RunTools(result.text, result.tool_calls)
    return FinalOutput(result.text, "stop")
