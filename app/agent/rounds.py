"""The model rounds of a turn: compile the request-local agent, call the model, run the tools it
asks for on the turn's context, until a final answer or the round limit.

Fallback model (LLM_FALLBACK_MODEL, a model name on the same endpoint): when a model round fails
(the request is refused or errors, or the stream breaks or ends without a finish reason), the
fallback model re-runs that same round, with the same messages, and answers the rest of the turn,
only if all of these hold: a fallback is configured and is not already the one answering, no
memory operation has been staged in this turn, and no answer text has been streamed to the client
yet. Otherwise the turn ends with `error` and nothing is committed. A timeout or a disconnect never
triggers the fallback.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import assert_never

import structlog

from app.agent.agents import Agent
from app.agent.context import TurnContext
from app.agent.events import (
    SEARCH_TOOL_NAME,
    DeltaEvent,
    FinishReason,
    ToolEvent,
    TurnEvent,
    Usage,
)
from app.agent.llm import Message, ModelFailure, RoundResult, ToolCallRequest
from app.agent.prompts import MemoryView
from app.agent.request import TurnRequest
from app.agent.search_tool import run_search_tool
from app.agent.sources import ConversationSource, prompt_sources
from app.agent.steps import FinalOutput, RunTools, ToolLimit, next_step
from app.agent.tools import run_memory_tool, unknown_tool_result
from app.memory.contract import MEMORY_TOOL_NAME

log = structlog.get_logger(__name__)

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

Emit = Callable[[TurnEvent], None]


@dataclass
class Progress:
    """What the user has seen so far (for the transcript), which model answers, what it cost."""

    model: str
    text: list[str] = field(default_factory=list)
    rounds: int = 0
    usage: Usage | None = field(default_factory=lambda: Usage(0, 0))

    @property
    def answer(self) -> str:
        return "".join(self.text)

    def count(self, usage: Usage | None) -> None:
        """Add a round's tokens; one round that did not report them makes the total unknown."""
        self.usage = None if usage is None or self.usage is None else self.usage + usage


async def run_rounds(
    ctx: TurnContext,
    shared: Agent,
    request: TurnRequest,
    max_rounds: int,
    progress: Progress,
    emit: Emit,
    recalled: Sequence[ConversationSource] = (),
) -> FinishReason:
    memory = None
    if ctx.user_id is not None and shared.uses_memory:
        memory = MemoryView(
            ctx.memory_status,
            ctx.baseline,
            ctx.memory_tool_offered,
            ctx.save_mode,
            ctx.memory_targets,
            ctx.project_name,
            owner=ctx.user_id,
        )
    # A request-local copy; the shared agent is untouched.
    agent = shared.for_turn(memory, search=ctx.search_tool_offered, recalled=recalled)
    if memory is not None and memory.status == "available":
        # The entries the prompt's block shows, with the verdicts it was rendered with.
        withheld = shared.prompts.withheld.of(memory.owner)
        ctx.sources.memory = prompt_sources(ctx.baseline, withheld, ctx.project_id)
    ctx.sources.given(recalled)
    messages = _initial_messages(agent, request)
    for round_number in range(1, max_rounds + 1):
        progress.rounds = round_number
        result = await _model_round(ctx, agent, request, messages, progress, emit)
        step = next_step(result, round_number, max_rounds)
        match step:
            case FinalOutput(finish_reason=reason):
                return reason
            case ToolLimit():
                return "tool_limit"
            case RunTools(text=text, calls=calls):
                results = [await _run_tool(ctx, agent, call, emit) for call in calls]
                messages.append(_assistant_message(text, calls, results))
                messages.extend(
                    {"role": "tool", "tool_call_id": call.id, "content": content}
                    for call, (content, _echo) in zip(calls, results, strict=True)
                )
            case _:
                assert_never(step)
    raise AssertionError("the last round is always classified as ToolLimit")


def _initial_messages(agent: Agent, request: TurnRequest) -> list[Message]:
    messages: list[Message] = [{"role": "system", "content": agent.instructions}]
    messages.extend({"role": item.role, "content": item.content} for item in request.history)
    messages.append({"role": "user", "content": request.message})
    return messages


async def _model_round(
    ctx: TurnContext,
    agent: Agent,
    request: TurnRequest,
    messages: Sequence[Message],
    progress: Progress,
    emit: Emit,
) -> RoundResult:
    def on_text(piece: str) -> None:
        # A model may answer with NUL (PostgreSQL cannot store it in text) or a lone surrogate
        # (not storable text anywhere): shown and stored as U+FFFD, so the turn keeps its one
        # assistant row and the transcript is what the client saw.
        piece = _UNSTORABLE.sub("\ufffd", piece)
        progress.text.append(piece)
        emit(DeltaEvent(piece))

    while True:
        try:
            result = await agent.model.run_round(
                progress.model, messages, agent.tools, on_text, request.sampling
            )
        except ModelFailure as failure:
            fallback = agent.model.fallback
            # The fallback may answer only a turn that has neither staged memory nor shown any
            # text: otherwise its answer could contradict what was staged or said.
            if (
                fallback is None
                or progress.model == fallback
                or ctx.staged
                or progress.text
                or failure.streamed
            ):
                raise
            log.warning("llm.fallback", turn_id=ctx.turn_id, failure=failure.code, model=fallback)
            progress.model = fallback
            continue
        progress.count(result.usage)
        return result


async def _run_tool(
    ctx: TurnContext, agent: Agent, call: ToolCallRequest, emit: Emit
) -> tuple[str, bool]:
    """The tool's answer for the model, and whether its arguments may be echoed back to it
    (arguments refused for their size or shape are not: the next request stays bounded)."""
    offered = {str(tool["function"]["name"]) for tool in agent.tools}
    if call.name not in offered:
        if call.name == MEMORY_TOOL_NAME:
            emit(ToolEvent("rejected", 0))
        elif call.name == SEARCH_TOOL_NAME:
            emit(ToolEvent.search("rejected", 0))
        return unknown_tool_result(call.name), False
    if call.name == SEARCH_TOOL_NAME:
        found = await run_search_tool(ctx, call.arguments, oversized=call.oversized)
        ctx.sources.given(found.given)
        emit(ToolEvent.search(found.outcome, found.result_count))
        return found.content, found.echo_arguments
    result = await run_memory_tool(ctx, call.arguments, oversized=call.oversized)
    emit(ToolEvent(result.outcome, result.operation_count))
    return result.content, result.echo_arguments


def _assistant_message(
    text: str, calls: Sequence[ToolCallRequest], results: Sequence[tuple[str, bool]]
) -> Message:
    return {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": call.arguments if echo else "{}",
                },
            }
            for call, (_content, echo) in zip(calls, results, strict=True)
        ],
    }
