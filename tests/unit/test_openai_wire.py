"""The chat-completions encoding of turn events (pure): what a client sees of a turn is its text
and how it finished, in objects the `openai` SDK's own types accept; memory never shows."""

from __future__ import annotations

import json
from typing import get_args

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from app.agent.events import (
    DeltaEvent,
    DoneEvent,
    ErrorEvent,
    FinishReason,
    MemoryEvent,
    StartEvent,
    ToolEvent,
    TurnEvent,
    Usage,
)
from app.agent.openai_wire import (
    FINISH_REASONS,
    AnswerCollector,
    ChunkEncoder,
    Completion,
)
from app.memory.rules import MemoryUsage

COMPLETION = Completion(id="chatcmpl-t1", created=1_700_000_000, model="m-1")
START = StartEvent(conversation_id=None, turn_id="t1", memory_status="available")
SECRET = "The user's locker code is in the blue notebook."
# A turn that saves memory: tool and memory events in the middle of the answer.
SAVING_TURN: list[TurnEvent] = [
    START,
    DeltaEvent("Let me note that. "),
    ToolEvent(outcome="staged", operation_count=1),
    DeltaEvent("Saved."),
    MemoryEvent(outcome="committed", usage=MemoryUsage(len(SECRET), 0)),
    DoneEvent(finish_reason="stop", usage=Usage(120, 30)),
]


def _encode(events: list[TurnEvent], *, include_usage: bool) -> list[dict[str, object]]:
    encoder = ChunkEncoder(COMPLETION, include_usage=include_usage)
    chunks = [chunk for event in events for chunk in encoder.encode(event)]
    return chunks + encoder.close()


@pytest.mark.parametrize("include_usage", [False, True], ids=["no-usage", "usage"])
def test_a_saving_turn_streams_only_its_text_and_finish(include_usage: bool) -> None:
    """Role chunk, two text chunks, the finishing chunk, and the usage chunk only when asked;
    the tool and memory events add nothing; every chunk is a valid ChatCompletionChunk."""
    chunks = _encode(SAVING_TURN, include_usage=include_usage)
    parsed = [ChatCompletionChunk.model_validate(chunk) for chunk in chunks]
    deltas = [c.choices[0].delta for c in parsed if c.choices]
    assert deltas[0].role == "assistant" and deltas[0].content == ""
    assert [d.content for d in deltas[1:3]] == ["Let me note that. ", "Saved."]
    finishing = parsed[3].choices[0]
    assert finishing.finish_reason == "stop" and finishing.delta.content is None
    if include_usage:
        assert len(parsed) == 5 and parsed[4].choices == []
        assert parsed[4].usage is not None
        assert (
            parsed[4].usage.prompt_tokens,
            parsed[4].usage.completion_tokens,
            parsed[4].usage.total_tokens,
        ) == (120, 30, 150)
        assert all(chunk["usage"] is None for chunk in chunks[:4])
    else:
        assert len(parsed) == 4 and all("usage" not in chunk for chunk in chunks)
    text = json.dumps(chunks)
    for hidden in ("tool_calls", "memory_update", "staged", "committed", "operation_count"):
        assert hidden not in text
    assert {c.id for c in parsed} == {COMPLETION.id}


def test_unknown_usage_sends_no_usage_chunk() -> None:
    """A model that reports no usage: the stream ends at the finishing chunk even when asked."""
    chunks = _encode([START, DeltaEvent("Hi"), DoneEvent("stop")], include_usage=True)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, "stop"]


def test_every_finish_reason_has_an_openai_one() -> None:
    """The map is total, and its values are finish reasons the SDK knows."""
    assert set(FINISH_REASONS) == set(get_args(FinishReason))
    assert FINISH_REASONS["tool_limit"] == "length"
    for reason in get_args(FinishReason):
        chunk = _encode([START, DoneEvent(reason)], include_usage=False)[-1]
        ChatCompletionChunk.model_validate(chunk)


def test_a_failed_turn_ends_its_stream_with_an_error_object() -> None:
    """After the text already sent, the error object is the last thing; no finishing chunk."""
    chunks = _encode(
        [START, DeltaEvent("Half"), ErrorEvent("model_error", "The model failed.")],
        include_usage=True,
    )
    assert chunks[-1] == {
        "error": {
            "message": "The model failed.",
            "type": "server_error",
            "param": None,
            "code": "model_error",
        }
    }
    assert all("error" not in chunk for chunk in chunks[:-1])


def test_a_stream_that_stops_without_an_end_gets_an_error_object() -> None:
    chunks = _encode([START, DeltaEvent("Half")], include_usage=False)
    assert chunks[-1]["error"] == {
        "message": "The turn ended unexpectedly; nothing was saved to memory.",
        "type": "server_error",
        "param": None,
        "code": "internal_error",
    }


def test_a_plain_answer_is_one_chat_completion() -> None:
    collector = AnswerCollector(COMPLETION)
    for event in SAVING_TURN:
        collector.add(event)
    status, body = collector.result()
    assert status == 200
    completion = ChatCompletion.model_validate(body)
    message = completion.choices[0].message
    assert message.content == "Let me note that. Saved." and message.tool_calls is None
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens == 150
    assert (completion.id, completion.model, completion.created) == (
        COMPLETION.id,
        COMPLETION.model,
        COMPLETION.created,
    )
    assert "memory" not in json.dumps(body)


@pytest.mark.parametrize(
    ("events", "status", "code"),
    [
        pytest.param([START, ErrorEvent("model_error", "m")], 502, "model_error", id="model"),
        pytest.param(
            [START, DeltaEvent("a"), ErrorEvent("model_stream_broken", "m")],
            502,
            "model_stream_broken",
            id="broken-stream",
        ),
        pytest.param([ErrorEvent("timeout", "m")], 504, "timeout", id="timeout"),
        pytest.param(
            [START, ErrorEvent("internal_error", "m")], 500, "internal_error", id="internal"
        ),
        pytest.param([START, DeltaEvent("a")], 500, "internal_error", id="no-end"),
    ],
)
def test_a_failed_plain_answer_is_an_openai_error_with_its_status(
    events: list[TurnEvent], status: int, code: str
) -> None:
    """The upstream model failing is 502, running out of time 504, anything else 500."""
    collector = AnswerCollector(COMPLETION)
    for event in events:
        collector.add(event)
    got_status, body = collector.result()
    assert (got_status, body["error"]["code"], body["error"]["type"]) == (
        status,
        code,
        "server_error",
    )
    assert set(body["error"]) == {"message", "type", "param", "code"}
