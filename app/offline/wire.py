"""The chat-completions wire format the offline model speaks: the request parts a model reads,
the replies it can give, and their streamed (`data:` chunks, then `[DONE]`) and plain bodies."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

OFFLINE_MODEL_NAME = "offline-memory-1"
# Generation options a request may carry; recorded for tests, ignored by the canned answers.
SAMPLING_KEYS = (
    "max_tokens",
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stop",
)


@dataclass(frozen=True)
class Text:
    text: str
    finish_reason: str = "stop"


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str | Mapping[str, Any]
    id: str | None = None

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True)
class ToolCalls:
    calls: tuple[ToolCall, ...]
    text: str = ""


Reply = Text | ToolCalls


@dataclass(frozen=True)
class ChatRequest:
    """The parts of a chat-completions request body that a model reads."""

    model: str
    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...]
    stream: bool
    include_usage: bool
    sampling: Mapping[str, Any] = field(default_factory=dict)  # max_tokens, temperature, ...

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ChatRequest:
        options = body.get("stream_options") or {}
        return cls(
            model=str(body.get("model", "")),
            messages=tuple(body.get("messages") or ()),
            tools=tuple(body.get("tools") or ()),
            stream=bool(body.get("stream", False)),
            include_usage=bool(options.get("include_usage", False)),
            sampling={key: body[key] for key in SAMPLING_KEYS if key in body},
        )

    @property
    def tool_names(self) -> frozenset[str]:
        return frozenset(
            str(tool.get("function", {}).get("name")) for tool in self.tools if "function" in tool
        )

    def system_text(self) -> str:
        return "\n".join(
            content_text(message.get("content"))
            for message in self.messages
            if message.get("role") in ("system", "developer")
        )


def content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


_WORD = re.compile(r"\s*\S+\s*")


def words(text: str) -> list[str]:
    """Pieces that concatenate back to `text`: each word with the whitespace after it."""
    return list(iter_words(text))


def iter_words(text: str) -> Iterator[str]:
    """`words(text)` one at a time: a slow stream holds its position, not a list of pieces
    (a long answer's list was much of an idle stream's memory) nor a regex scanner."""
    position = 0
    while (match := _WORD.match(text, position)) is not None:
        position = match.end()
        yield match.group()
    if not position and text:
        yield text


def _split(text: str, parts: int) -> list[str]:
    size = max(1, -(-len(text) // parts))
    return [text[index : index + size] for index in range(0, len(text), size)] or [""]


def prompt_tokens(request: ChatRequest) -> int:
    return sum(len(content_text(m.get("content")).split()) for m in request.messages)


def _usage(prompt: int, output: str) -> dict[str, int]:
    completion = len(output.split())
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


@dataclass
class _Ids:
    completion: str = field(default_factory=lambda: f"chatcmpl-offline-{time.time_ns()}")
    created: int = field(default_factory=lambda: int(time.time()))


def _chunk(ids: _Ids, model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": ids.completion,
        "object": "chat.completion.chunk",
        "created": ids.created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _tool_call_dicts(reply: ToolCalls) -> list[dict[str, Any]]:
    return [
        {
            "id": call.id or f"call_{index}",
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments_json()},
        }
        for index, call in enumerate(reply.calls)
    ]


def stream_body(
    request: ChatRequest, reply: Text | ToolCalls, delay_seconds: float
) -> AsyncIterator[bytes]:
    """The server-sent-event chunks of a streamed completion, paced by `delay_seconds`. The
    stream keeps what it still needs of the request (its model, usage flag and prompt size),
    not the parsed request itself: its messages and tool schemas were the largest part of an
    idle stream's memory."""
    usage_prompt = prompt_tokens(request) if request.include_usage else None
    return _stream_body(request.model or OFFLINE_MODEL_NAME, usage_prompt, reply, delay_seconds)


async def _stream_body(
    model: str, usage_prompt: int | None, reply: Text | ToolCalls, delay_seconds: float
) -> AsyncIterator[bytes]:
    ids = _Ids()
    yield _chunk(ids, model, {"role": "assistant", "content": ""})
    text = reply.text
    for position, piece in enumerate(iter_words(text)):
        if position and delay_seconds:
            await asyncio.sleep(delay_seconds)
        yield _chunk(ids, model, {"content": piece})
    finish = reply.finish_reason if isinstance(reply, Text) else "tool_calls"
    output = text
    if isinstance(reply, ToolCalls):
        for index, call in enumerate(_tool_call_dicts(reply)):
            function = call["function"]
            output += function["arguments"]
            yield _chunk(
                ids,
                model,
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": function["name"], "arguments": ""},
                        }
                    ]
                },
            )
            for piece in _split(function["arguments"], 3):
                if delay_seconds:
                    await asyncio.sleep(delay_seconds)
                yield _chunk(
                    ids,
                    model,
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "function": {"arguments": piece},
                            }
                        ]
                    },
                )
    yield _chunk(ids, model, {}, finish)
    if usage_prompt is not None:
        usage = {
            "id": ids.completion,
            "object": "chat.completion.chunk",
            "created": ids.created,
            "model": model,
            "choices": [],
            "usage": _usage(usage_prompt, output),
        }
        yield b"data: " + json.dumps(usage).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


def completion_body(request: ChatRequest, reply: Text | ToolCalls) -> dict[str, Any]:
    """A non-streamed chat completion."""
    ids = _Ids()
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    finish = reply.finish_reason if isinstance(reply, Text) else "tool_calls"
    output = reply.text
    if isinstance(reply, ToolCalls):
        message["tool_calls"] = _tool_call_dicts(reply)
        output += "".join(call.arguments_json() for call in reply.calls)
    return {
        "id": ids.completion,
        "object": "chat.completion",
        "created": ids.created,
        "model": request.model or OFFLINE_MODEL_NAME,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": _usage(prompt_tokens(request), output),
    }
