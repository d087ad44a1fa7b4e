"""The AI SDK UI message stream encoder and the `useChat` request parser (pure parts).

The real `ai` package parses the real stream in tests/node; these tests pin the mapping rules.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.agent.events import (
    DeltaEvent,
    DoneEvent,
    ErrorEvent,
    MemoryEvent,
    StartEvent,
    ToolEvent,
    TurnEvent,
)
from app.api.streams.ui_stream import (
    _body,
    parse_ui_request,
    ui_chunks,
    ui_replacement,
    wants_ui_stream,
)
from app.conversations.service import AfterTurn
from app.errors import Unprocessable
from app.memory.rules import MemoryUsage

START = StartEvent(
    conversation_id="c1", turn_id="t1", memory_status="available", transcript_status="stored"
)


async def _events(*events: TurnEvent) -> AsyncIterator[TurnEvent]:
    for event in events:
        yield event


async def _chunks(*events: TurnEvent) -> list[dict[str, Any]]:
    return [chunk async for chunk in ui_chunks(_events(*events))]


async def test_a_memory_turn_maps_to_steps_text_tool_and_data_parts() -> None:
    """A turn that saves: start, step, tool call without content, new step, text, data, finish."""
    chunks = await _chunks(
        START,
        ToolEvent(outcome="staged", operation_count=1),
        DeltaEvent("Saved."),
        MemoryEvent(outcome="committed", usage=MemoryUsage(31, 0)),
        DoneEvent(finish_reason="stop"),
    )
    assert [chunk["type"] for chunk in chunks] == [
        "start",
        "start-step",
        "tool-input-available",
        "tool-output-available",
        "finish-step",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "data-memory",
        "finish-step",
        "finish",
    ]
    assert chunks[0]["messageMetadata"] == {
        "conversation_id": "c1",
        "turn_id": "t1",
        "memory": {"status": "available"},
        "transcript": {"status": "stored"},
    }
    tool_input, tool_output = chunks[2], chunks[3]
    assert tool_input["toolName"] == "memory_update"
    assert tool_input["input"] == {"operation_count": 1}
    assert tool_output["toolCallId"] == tool_input["toolCallId"]
    assert tool_output["output"] == {"outcome": "staged", "operation_count": 1}
    assert chunks[9]["data"] == {
        "outcome": "committed",
        "user_characters": 31,
        "memory_characters": 0,
    }
    assert chunks[-1]["finishReason"] == "stop"


async def test_text_pieces_share_one_text_part() -> None:
    """Consecutive deltas are one text part: one start, one delta each, one end, same id."""
    chunks = await _chunks(START, DeltaEvent("a "), DeltaEvent("b"), DoneEvent("length"))
    texts = [chunk for chunk in chunks if chunk["type"].startswith("text-")]
    assert [chunk["type"] for chunk in texts] == [
        "text-start",
        "text-delta",
        "text-delta",
        "text-end",
    ]
    assert len({chunk["id"] for chunk in texts}) == 1
    assert chunks[-1] == {
        "type": "finish",
        "finishReason": "length",
        "messageMetadata": {"finish_reason": "length"},
    }


async def test_an_error_closes_open_parts_and_ends_with_error_then_finish() -> None:
    """A failed turn: the open text part is closed, then `error` (with the message), then finish."""
    chunks = await _chunks(START, DeltaEvent("par"), ErrorEvent(code="model_error", message="boom"))
    types = [chunk["type"] for chunk in chunks]
    assert types[-5:] == ["text-end", "finish-step", "data-error", "error", "finish"]
    assert chunks[-2] == {"type": "error", "errorText": "boom"}
    assert chunks[-3]["data"] == {"code": "model_error"} and chunks[-3]["transient"] is True


async def test_a_stream_without_a_terminal_event_still_finishes() -> None:
    """Events that end early still yield a well-formed message (finish reason `other`)."""
    chunks = await _chunks(START, DeltaEvent("x"))
    assert [chunk["type"] for chunk in chunks][-3:] == ["text-end", "finish-step", "finish"]
    assert chunks[-1]["finishReason"] == "other"


async def test_the_body_is_sse_data_lines_ending_with_done() -> None:
    """Each chunk is one `data:` line of JSON; the stream ends with `data: [DONE]`."""
    body = b"".join([piece async for piece in _body(_events(START, DoneEvent("stop")))])
    blocks = body.decode().split("\n\n")
    assert blocks[-1] == "" and blocks[-2] == "data: [DONE]"
    for block in blocks[:-2]:
        assert block.startswith("data: ") and "\n" not in block
        json.loads(block.removeprefix("data: "))


async def test_line_breaks_json_keeps_raw_never_split_a_data_line() -> None:
    """Text with U+0085, U+2028 and U+2029 (which str.splitlines-like readers end a line at)
    stays on one `data:` line per chunk and decodes back to the same text: the UI stream
    shares `/v1/chat`'s encoder."""
    text = "a\u0085b\u2028c\u2029d"
    body = b"".join([piece async for piece in _body(_events(START, DeltaEvent(text)))])
    lines = body.decode().splitlines()
    assert all(line == "" or line.startswith("data: ") for line in lines)
    deltas = [
        json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: {")
    ]
    assert "".join(c["delta"] for c in deltas if c["type"] == "text-delta") == text


@pytest.mark.parametrize(
    ("headers", "query", "expected"),
    [
        ({"x-vercel-ai-ui-message-stream": "v1"}, {}, True),
        ({}, {"protocol": "ai-sdk"}, True),
        ({}, {}, False),
        ({"x-vercel-ai-ui-message-stream": "v2"}, {}, False),
        ({}, {"protocol": "sse"}, False),
    ],
    ids=["header", "query", "neither", "unknown-version", "other-protocol"],
)
def test_the_request_selects_the_protocol(
    headers: dict[str, str], query: dict[str, str], expected: bool
) -> None:
    """The UI stream is chosen only by the documented header or query value."""
    assert wants_ui_stream(headers, query) is expected


def _ui(role: str, text: str, **extra: Any) -> dict[str, Any]:
    parts = [{"type": "text", "text": text}]
    return {"id": f"m-{role}-{text}", "role": role, "parts": parts, **extra}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"message": "hi"}, ("hi", None)),
        ({"message": "hi", "conversation_id": "c9"}, ("hi", "c9")),
        (
            {"id": "chat", "messages": [_ui("user", "hello")], "trigger": "submit-message"},
            ("hello", None),
        ),
        (
            {
                "id": "chat",
                "messages": [
                    _ui("user", "one"),
                    _ui("assistant", "ok", metadata={"conversation_id": "c1"}),
                    _ui("user", "two"),
                ],
            },
            ("two", "c1"),
        ),
        (
            {
                "id": "chat",
                "conversation_id": "c2",
                "messages": [
                    _ui("assistant", "ok", metadata={"conversation_id": "c1"}),
                    _ui("user", "two"),
                ],
            },
            ("two", "c2"),
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "parts": [
                            {"type": "text", "text": "a"},
                            {"type": "file", "url": "x"},
                            {"type": "text", "text": "b"},
                        ],
                    }
                ]
            },
            ("a\nb", None),
        ),
    ],
    ids=[
        "plain",
        "plain-with-conversation",
        "usechat-first",
        "usechat-continues",
        "explicit-wins",
        "text-parts-joined",
    ],
)
def test_use_chat_bodies_give_the_last_user_text_and_the_conversation(
    body: dict[str, Any], expected: tuple[str, str | None]
) -> None:
    """The text is the last user message's; the conversation is the body's or the metadata's."""
    assert parse_ui_request(body) == expected


@pytest.mark.parametrize(
    "body",
    [
        [],
        {},
        {"messages": "x"},
        {"messages": [_ui("assistant", "only")]},
        {"messages": [{"role": "user", "parts": [{"type": "file", "url": "x"}]}]},
        {"message": "hi", "conversation_id": 5},
    ],
    ids=["not-object", "empty", "messages-not-list", "no-user", "no-text", "bad-conversation"],
)
def test_unusable_bodies_are_422(body: Any) -> None:
    """A body with no user text is rejected with a clear reason, before any turn starts."""
    with pytest.raises(Unprocessable):
        parse_ui_request(body)


T1, T2 = "3f2a1c9e-7b44-4d0e-9a51-0c6e8d2b7f10", "9b8c7d6e-5f4a-4b3c-8d2e-1f0a9b8c7d6e"


def _answer(turn: str) -> dict[str, Any]:
    """An answer as the AI SDK keeps it: the id our `start` chunk gave it."""
    return {"id": f"msg_{turn}", "role": "assistant", "parts": [{"type": "text", "text": "ok"}]}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"messages": [_ui("user", "a")], "trigger": "submit-message"}, None),
        (
            {"messages": [_ui("user", "a"), _answer(T1), _ui("user", "b")]},
            None,
        ),
        (
            {
                "messages": [_ui("user", "a")],
                "trigger": "regenerate-message",
                "messageId": f"msg_{T1}",
            },
            T1,
        ),
        (
            {
                "messages": [_ui("user", "a"), _answer(T1), _ui("user", "b")],
                "trigger": "regenerate-message",
            },
            AfterTurn(T1),
        ),
        ({"messages": [_ui("user", "a")], "trigger": "regenerate-message"}, AfterTurn(None)),
        (
            {
                "messages": [
                    _ui("user", "a"),
                    _answer(T1),
                    _ui("user", "b"),
                    _answer(T2),
                    _ui("user", "c2", id="m-user-c"),
                ],
                "trigger": "submit-message",
                "messageId": "m-user-c",
            },
            AfterTurn(T2),
        ),
        (
            {
                "messages": [_ui("user", "a2", id="m-user-a")],
                "trigger": "submit-message",
                "messageId": "m-user-a",
            },
            AfterTurn(None),
        ),
        (
            {
                "messages": [_ui("user", "a"), _ui("assistant", "theirs"), _ui("user", "b")],
                "trigger": "regenerate-message",
            },
            None,
        ),
        ({"message": "plain", "trigger": "regenerate-message"}, None),
        (
            {
                "messages": [_ui("user", "a"), _answer(T1)],
                "trigger": "submit-message",
                "messageId": f"msg_{T1}",
            },
            None,
        ),
        (
            {
                "messages": [_ui("user", "a"), _answer(T1), _ui("user", "b")],
                "trigger": "submit-message",
                "messageId": "m-user-a",
            },
            None,
        ),
    ],
    ids=[
        "new-turn",
        "no-trigger",
        "regenerate-named-answer",
        "regenerate-last-answer",
        "regenerate-first-answer",
        "edit",
        "edit-first-message",
        "answer-not-ours",
        "plain-body",
        "continuation-not-an-edit",
        "named-message-not-last",
    ],
)
def test_use_chat_regenerate_and_edit_name_the_turn_they_replace(
    body: dict[str, Any], expected: str | AfterTurn | None
) -> None:
    """regenerate() and sendMessage({messageId}) replace a turn: the one whose answer is named,
    else the one after the last answer the client kept (the first with none); any other body,
    or an answer the server did not make, is a new turn."""
    assert ui_replacement(body) == expected
