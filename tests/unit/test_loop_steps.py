"""Loop decisions as data, and the assembly of streamed tool-call fragments."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.agent.llm import RoundResult, ToolCallRequest, _Fragments
from app.agent.steps import FinalOutput, RoundStep, RunTools, ToolLimit, next_step

CALL = ToolCallRequest("c1", "memory_update", '{"operations": []}')


@pytest.mark.parametrize(
    ("result", "round_number", "expected"),
    [
        pytest.param(RoundResult("Hi.", (), "stop"), 1, FinalOutput("Hi.", "stop"), id="answer"),
        pytest.param(RoundResult("Hi", (), "length"), 1, FinalOutput("Hi", "length"), id="length"),
        pytest.param(
            RoundResult("", (CALL,), "length"),
            1,
            FinalOutput("", "length"),
            id="truncated-call-is-length",
        ),
        pytest.param(
            RoundResult("ok", (CALL,), "tool_calls"), 1, RunTools("ok", (CALL,)), id="tools"
        ),
        pytest.param(RoundResult("", (CALL,), "tool_calls"), 6, ToolLimit(""), id="limit"),
        pytest.param(
            RoundResult("done", (), "stop"),
            6,
            FinalOutput("done", "stop"),
            id="answer-on-last-round",
        ),
    ],
)
def test_next_step(result: RoundResult, round_number: int, expected: RoundStep) -> None:
    """Each round is classified exactly once; the last round cannot run more tools."""
    assert next_step(result, round_number, max_rounds=6) == expected


def _delta(
    index: int, id: str | None = None, name: str | None = None, arguments: str | None = None
) -> SimpleNamespace:
    return SimpleNamespace(
        index=index, id=id, function=SimpleNamespace(name=name, arguments=arguments)
    )


def test_fragments_assemble_by_index_even_interleaved() -> None:
    """Tool-call pieces are joined per index, in index order, whatever the arrival order."""
    fragments = _Fragments()
    for delta in (
        _delta(1, "b", "memory_update", ""),
        _delta(0, "a", "memory_update", '{"oper'),
        _delta(1, arguments='{"x"'),
        _delta(0, arguments='ations": []}'),
        _delta(1, arguments=": 1}"),
    ):
        fragments.add(delta)
    assert fragments.calls() == (
        ToolCallRequest("a", "memory_update", '{"operations": []}'),
        ToolCallRequest("b", "memory_update", '{"x": 1}'),
    )
