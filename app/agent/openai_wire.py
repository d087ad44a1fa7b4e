"""A turn's events as the chat-completions wire format: `chat.completion.chunk` objects for a
stream, one `chat.completion` for a plain answer, and errors in OpenAI's shape. Pure values in,
dictionaries out; the HTTP edge is `app/api/openai_compat.py`.

What a client of this format sees of a turn is its answer text and how it finished. The memory
tool runs server-side: its calls and the memory event are not part of the wire format, so no
`tool_calls` and no memory content ever reach the client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.agent.events import (
    DeltaEvent,
    DoneEvent,
    ErrorEvent,
    FinishReason,
    MemoryEvent,
    SourcesEvent,
    StartEvent,
    ToolEvent,
    TurnEvent,
    Usage,
)

Chunk = dict[str, Any]

# A turn stopped at the tool-round limit has a possibly unfinished answer and no tool calls for
# the client to run: "length" (cut short by a limit) is the OpenAI reason that says so.
FINISH_REASONS: dict[FinishReason, str] = {
    "stop": "stop",
    "length": "length",
    "tool_limit": "length",
}

# A failed turn answered without streaming: the upstream model failed (502), the turn ran out
# of time (504), anything else is the service's own failure (500).
FAILURE_STATUS: dict[str, int] = {
    "model_error": 502,
    "model_stream_broken": 502,
    "timeout": 504,
    "database_busy": 503,
}
SERVER_ERROR = "server_error"
INVALID_REQUEST = "invalid_request_error"


def error_object(
    message: str, *, code: str, type: str = INVALID_REQUEST, param: str | None = None
) -> Chunk:
    """`{"error": {"message", "type", "param", "code"}}`, the body the OpenAI SDK parses."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def usage_object(usage: Usage) -> Chunk:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def failure_status(code: str) -> int:
    return FAILURE_STATUS.get(code, 500)


def turn_error(event: ErrorEvent) -> Chunk:
    return error_object(event.message, code=event.code, type=SERVER_ERROR)


@dataclass(frozen=True)
class Completion:
    """What every object of one answer repeats: its id, creation time and model id."""

    id: str
    created: int
    model: str

    def chunk(self, delta: Chunk, finish_reason: str | None = None) -> Chunk:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }


class ChunkEncoder:
    """Turn events to stream chunks: a role chunk, one chunk per text piece, a finishing chunk,
    then (if asked) a usage chunk; a failed turn ends with an error object instead."""

    def __init__(self, completion: Completion, *, include_usage: bool) -> None:
        self.completion = completion
        self.include_usage = include_usage
        self.finished = False

    def _with_usage_field(self, chunk: Chunk) -> Chunk:
        # With include_usage, OpenAI puts `"usage": null` on every chunk but the last.
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def encode(self, event: TurnEvent) -> list[Chunk]:
        match event:
            case StartEvent():
                return [
                    self._with_usage_field(
                        self.completion.chunk({"role": "assistant", "content": ""})
                    )
                ]
            case DeltaEvent():
                return [self._with_usage_field(self.completion.chunk({"content": event.text}))]
            case ToolEvent() | MemoryEvent() | SourcesEvent():
                return []  # server-side memory: never shown to the client
            case DoneEvent():
                self.finished = True
                chunks = [
                    self._with_usage_field(
                        self.completion.chunk({}, FINISH_REASONS[event.finish_reason])
                    )
                ]
                if self.include_usage and event.usage is not None:
                    chunks.append(
                        {
                            **self.completion.chunk({}),
                            "choices": [],
                            "usage": usage_object(event.usage),
                        }
                    )
                return chunks
            case ErrorEvent():
                self.finished = True
                return [turn_error(event)]

    def close(self) -> list[Chunk]:
        """What ends a stream whose events stopped without `done` or `error`."""
        if self.finished:
            return []
        self.finished = True
        return [
            error_object(
                "The turn ended unexpectedly; nothing was saved to memory.",
                code="internal_error",
                type=SERVER_ERROR,
            )
        ]


class AnswerCollector:
    """Turn events to one `chat.completion` (status 200), or to an error and its status."""

    def __init__(self, completion: Completion) -> None:
        self.completion = completion
        self._text: list[str] = []
        self._done: DoneEvent | None = None
        self._error: ErrorEvent | None = None

    def add(self, event: TurnEvent) -> None:
        match event:
            case DeltaEvent():
                self._text.append(event.text)
            case DoneEvent():
                self._done = event
            case ErrorEvent():
                self._error = event
            case StartEvent() | ToolEvent() | MemoryEvent() | SourcesEvent():
                pass  # server-side memory: never shown to the client

    def result(self) -> tuple[int, Chunk]:
        if self._error is not None:
            return failure_status(self._error.code), turn_error(self._error)
        if self._done is None:
            return 500, error_object(
                "The turn ended unexpectedly; nothing was saved to memory.",
                code="internal_error",
                type=SERVER_ERROR,
            )
        body: Chunk = {
            "id": self.completion.id,
            "object": "chat.completion",
            "created": self.completion.created,
            "model": self.completion.model,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "".join(self._text),
                        "refusal": None,
                    },
                    "logprobs": None,
                    "finish_reason": FINISH_REASONS[self._done.finish_reason],
                }
            ],
        }
        if self._done.usage is not None:
            body["usage"] = usage_object(self._done.usage)
        return 200, body
