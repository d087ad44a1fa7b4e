"""Every buffer the model's stream fills is bounded, each by its setting, tested at the bound and
one past it: a line and an event's data (LLM_MAX_EVENT_BYTES), the tool calls of one round
(LLM_MAX_TOOL_CALLS) and each call's arguments (LLM_MAX_TOOL_ARGUMENT_CHARS), dropped as they
come rather than checked once the round is whole. Chunks of the wrong shape are a broken
stream, never an unexpected error."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.agent.llm import (
    ModelFailure,
    RoundResult,
    StreamLimits,
    TooManyToolCalls,
    _Fragments,
    _Reading,
    build_model_client,
    round_finished,
)
from app.agent.model_sse import EventStream, StreamError
from app.settings import Settings

LIMIT = 1024


def line(size: int) -> bytes:
    """A `data:` line of exactly `size` bytes (without its line end)."""
    return b"data: " + b"x" * (size - len(b"data: "))


def feed_all(stream: EventStream, body: bytes, piece: int) -> list[str]:
    found: list[str] = []
    for start in range(0, len(body), piece):
        found.extend(stream.feed(body[start : start + piece]))
    return found + stream.end()


@pytest.mark.parametrize("piece", [1, 7, 4096], ids=["byte-by-byte", "small", "whole"])
def test_a_line_at_the_bound_is_read_and_one_byte_more_is_refused(piece: int) -> None:
    """A line of LLM_MAX_EVENT_BYTES is an event; one byte more raises as soon as the
    unfinished line passes the bound, however the bytes are cut."""
    assert feed_all(EventStream(LIMIT), line(LIMIT) + b"\n\n", piece) == ["x" * (LIMIT - 6)]
    with pytest.raises(StreamError):
        feed_all(EventStream(LIMIT), line(LIMIT + 1) + b"\n\n", piece)


def test_an_unfinished_line_is_refused_before_it_ends() -> None:
    """A line that never ends is refused once it passes the bound: the reader never holds
    more than the bound and one piece, whatever the model keeps sending."""
    stream = EventStream(LIMIT)
    stream.feed(b"data: ")
    with pytest.raises(StreamError):
        for _ in range(LIMIT):
            stream.feed(b"x" * 64)
    assert stream.size <= LIMIT


def test_an_event_of_many_lines_is_bounded_too() -> None:
    """Short data lines without the blank line that ends their event add up to the same
    bound (their bytes, line ends not counted): at it the event is read, past it refused."""
    lines = [b"data: " + b"y" * 10] * (LIMIT // 16)  # 16 bytes a line, without its end
    exact = b"".join(piece + b"\n" for piece in lines)
    assert sum(map(len, lines)) == LIMIT
    assert feed_all(EventStream(LIMIT), exact + b"\n", 64) == ["\n".join(["y" * 10] * len(lines))]
    with pytest.raises(StreamError):
        feed_all(EventStream(LIMIT), exact + b"data: z\n\n", 64)


@given(st.lists(st.integers(min_value=1, max_value=200), min_size=1, max_size=40))
def test_pieces_are_kept_not_joined_until_the_line_ends(sizes: list[int]) -> None:
    """The unfinished line is the list of its pieces (each kept once, as received), joined
    once when the line ends: the work per byte does not grow with the line's length."""
    stream = EventStream(10 * 200 * 40)
    pieces = [b"data: ", *(b"z" * size for size in sizes)]
    for piece in pieces:
        assert stream.feed(piece) == []
    assert stream.parts == pieces and stream.size == sum(map(len, pieces))
    assert stream.feed(b"\n\n") == ["z" * sum(sizes)]


def call_delta(index: int, arguments: str = "", name: str | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    return {"index": index, "id": f"call_{index}", "function": function}


def test_tool_calls_at_the_bound_are_kept_and_one_more_is_refused() -> None:
    """LLM_MAX_TOOL_CALLS calls are assembled; the first delta of one more call raises,
    before anything of it is kept."""
    fragments = _Fragments(StreamLimits(max_tool_calls=3))
    for index in range(3):
        fragments.add(call_delta(index, "{}", "memory_update"))
    fragments.add(call_delta(2, ""))  # more of a known call is not a new one
    assert len(fragments.calls()) == 3
    with pytest.raises(TooManyToolCalls):
        fragments.add(call_delta(3, "{}", "memory_update"))
    assert len(fragments.calls()) == 3


def test_arguments_at_the_bound_are_kept_and_past_it_dropped_as_they_come() -> None:
    """A call's arguments of exactly LLM_MAX_TOOL_ARGUMENT_CHARS are kept; one character
    more marks the call oversized and drops what was kept, and later pieces are not kept."""
    limits = StreamLimits(max_tool_argument_chars=LIMIT)
    fragments = _Fragments(limits)
    fragments.add(call_delta(0, "a" * (LIMIT - 1), "memory_update"))
    fragments.add(call_delta(0, "b"))
    fragments.add(call_delta(1, "c" * LIMIT, "conversation_search"))
    fragments.add(call_delta(1, "d"))
    fragments.add(call_delta(1, "e" * LIMIT))
    at_bound, past = fragments.calls()
    assert (len(at_bound.arguments), at_bound.oversized) == (LIMIT, False)
    assert (past.arguments, past.oversized, past.name) == ("", True, "conversation_search")
    assert fragments.arguments[1] == []


@pytest.mark.parametrize(
    "chunk",
    [
        pytest.param({"choices": "x"}, id="choices-not-a-list"),
        pytest.param({"choices": [1]}, id="choice-not-an-object"),
        pytest.param({"choices": [{"delta": [1]}]}, id="delta-not-an-object"),
        pytest.param({"choices": [{"delta": {"tool_calls": "x"}}]}, id="tool-calls-not-a-list"),
        pytest.param(
            {"choices": [{"delta": {"tool_calls": [{"index": "0"}]}}]}, id="index-not-an-int"
        ),
    ],
)
def test_a_chunk_of_the_wrong_shape_is_a_stream_error(chunk: dict[str, Any]) -> None:
    with pytest.raises(StreamError):
        _Reading().add(chunk, print)


@pytest.mark.parametrize(
    "usage",
    [
        pytest.param({"completion_tokens": 3}, id="no-prompt_tokens"),
        pytest.param({"prompt_tokens": "3", "completion_tokens": 3}, id="not-an-int"),
        pytest.param({"prompt_tokens": True, "completion_tokens": 3}, id="a-bool"),
    ],
)
def test_usage_without_its_counts_is_unknown_not_an_error(usage: dict[str, Any]) -> None:
    """A harmless report the model got wrong leaves the usage unknown; the round goes on."""
    reading = _Reading()
    reading.add({"choices": [], "usage": usage}, print)
    assert reading.usage is None


@pytest.mark.parametrize(
    ("reason", "has_calls", "finished"),
    [
        pytest.param("stop", False, True, id="stop"),
        pytest.param("stop", True, True, id="stop-with-calls"),
        pytest.param("length", False, True, id="length"),
        pytest.param("tool_calls", True, True, id="tool_calls"),
        pytest.param("tool_calls", False, False, id="tool_calls-without-calls"),
        pytest.param("error", False, False, id="error"),
        pytest.param("content_filter", False, False, id="content_filter"),
        pytest.param("function_call", True, False, id="function_call"),
        pytest.param("STOP", False, False, id="other-spelling"),
    ],
)
def test_only_stop_length_and_tool_calls_finish_a_round(
    reason: str, has_calls: bool, finished: bool
) -> None:
    assert round_finished(reason, has_calls) is finished


def sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks) + (
        b"data: [DONE]\n\n"
    )


def run_round(body: bytes, **settings: Any) -> tuple[RoundResult | ModelFailure, int]:
    """One round of the real model client over `body`, served in 64 KiB pieces; also how many
    bytes the client read before it stopped."""
    sent = [0]

    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 65_536):
            sent[0] = start + 65_536
            yield body[start : start + 65_536]

    def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=pieces())

    configured = Settings(_env_file=None, **settings)  # type: ignore[call-arg]
    client = build_model_client(configured, httpx.MockTransport(reply))

    async def run() -> RoundResult | ModelFailure:
        try:
            return await client.run_round("m", [{"role": "user", "content": "hi"}], [], print)
        except ModelFailure as failure:
            return failure
        finally:
            await client.aclose()

    return asyncio.run(run()), sent[0]


def test_a_16_mib_line_is_refused_after_the_bound_not_read_whole() -> None:
    """The model client stops at LLM_MAX_EVENT_BYTES: a 16 MiB line without a newline is a
    broken stream after about 1 MiB has been read, not buffered to its end."""
    outcome, read = run_round(b"data: " + b"x" * (16 * 1_048_576))
    assert isinstance(outcome, ModelFailure) and outcome.code == "model_stream_broken"
    assert read <= 1_048_576 + 2 * 65_536


def test_more_tool_calls_than_the_bound_fail_the_round_as_they_arrive() -> None:
    """10,000 calls in one round: a model_error at call LLM_MAX_TOOL_CALLS + 1, nothing run."""
    deltas = [
        {"choices": [{"delta": {"tool_calls": [call_delta(i, "{}", "x")]}}]} for i in range(10_000)
    ]
    finish = {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}
    outcome, read = run_round(sse(*deltas, finish), llm_max_tool_calls=16)
    assert isinstance(outcome, ModelFailure) and outcome.code == "model_error"
    assert "16 tool calls" in outcome.message
    at_bound, _ = run_round(sse(*deltas[:16], finish), llm_max_tool_calls=16)
    assert isinstance(at_bound, RoundResult) and len(at_bound.tool_calls) == 16
