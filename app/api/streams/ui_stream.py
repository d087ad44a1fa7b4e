"""The Vercel AI SDK UI message stream (v1) encoding of a turn, and the `useChat` request shape."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
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
)
from app.api.bodies import not_object
from app.api.streams.sse import SEND_TIMEOUT_SECONDS, EventStreamResponse, json_text, sse_data
from app.conversations.service import AfterTurn
from app.errors import Unprocessable

HEADER = "x-vercel-ai-ui-message-stream"
VERSION = "v1"
QUERY_VALUE = "ai-sdk"
# The id of turn T's answer in the stream's `start` chunk: the AI SDK keeps it as the
# assistant message's id and sends it back when that answer is regenerated.
ANSWER_ID_PREFIX = "msg_"

# The headers `createUIMessageStreamResponse` sends in ai@6 (UI_MESSAGE_STREAM_HEADERS).
HEADERS = {
    HEADER: VERSION,
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
}

# The UI stream's finish reasons are the model-level ones; a tool-round limit is "other".
FINISH_REASONS: dict[FinishReason, str] = {
    "stop": "stop",
    "length": "length",
    "tool_limit": "other",
}

Chunk = dict[str, Any]


def wants_ui_stream(headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
    """Chosen by header (`x-vercel-ai-ui-message-stream: v1`) or by `?protocol=ai-sdk`."""
    return headers.get(HEADER, "").strip().lower() == VERSION or (
        query.get("protocol", "").strip().lower() == QUERY_VALUE
    )


class UiChunkEncoder:
    """Turns typed turn events into UI message chunks, keeping the open text part and step."""

    def __init__(self) -> None:
        self._turn_id = "turn"
        self._text_id: str | None = None
        self._text_count = 0
        self._tool_count = 0
        self._step_open = False
        self.finished = False

    def _close_text(self) -> list[Chunk]:
        if self._text_id is None:
            return []
        chunk: Chunk = {"type": "text-end", "id": self._text_id}
        self._text_id = None
        return [chunk]

    def _close_step(self) -> list[Chunk]:
        closing = self._close_text()
        if self._step_open:
            closing.append({"type": "finish-step"})
            self._step_open = False
        return closing

    def _open_step(self) -> list[Chunk]:
        if self._step_open:
            return []
        self._step_open = True
        return [{"type": "start-step"}]

    def encode(self, event: TurnEvent) -> list[Chunk]:
        match event:
            case StartEvent():
                self._turn_id = event.turn_id
                start: Chunk = {
                    "type": "start",
                    "messageId": f"{ANSWER_ID_PREFIX}{event.turn_id}",
                    "messageMetadata": event.data(),
                }
                return [start, *self._open_step()]
            case DeltaEvent():
                chunks = self._open_step()
                if self._text_id is None:
                    self._text_count += 1
                    self._text_id = f"text_{self._turn_id}_{self._text_count}"
                    chunks.append({"type": "text-start", "id": self._text_id})
                chunks.append({"type": "text-delta", "id": self._text_id, "delta": event.text})
                return chunks
            case ToolEvent():
                # A tool call is shown without its content: only counts and the outcome.
                # A tool call ends the model round, as in the AI SDK's own server-tool streams,
                # so that `lastAssistantMessageIsCompleteWithToolCalls` never re-sends the turn.
                self._tool_count += 1
                call_id = f"call_{self._turn_id}_{self._tool_count}"
                chunks = [*self._close_text(), *self._open_step()]
                chunks.append(
                    {
                        "type": "tool-input-available",
                        "toolCallId": call_id,
                        "toolName": event.tool_name,
                        "input": event.counts(),
                    }
                )
                chunks.append(
                    {
                        "type": "tool-output-available",
                        "toolCallId": call_id,
                        "output": {"outcome": event.outcome, **event.counts()},
                    }
                )
                return [*chunks, *self._close_step()]
            case MemoryEvent():
                return [
                    *self._close_text(),
                    {"type": "data-memory", "id": f"memory_{self._turn_id}", "data": event.data()},
                ]
            case SourcesEvent():
                return [
                    {"type": "data-sources", "id": f"sources_{self._turn_id}", "data": event.data()}
                ]
            case DoneEvent():
                self.finished = True
                return [
                    *self._close_step(),
                    {
                        "type": "finish",
                        "finishReason": FINISH_REASONS[event.finish_reason],
                        "messageMetadata": {"finish_reason": event.finish_reason},
                    },
                ]
            case ErrorEvent():
                self.finished = True
                return [
                    *self._close_step(),
                    {"type": "data-error", "data": {"code": event.code}, "transient": True},
                    {"type": "error", "errorText": event.message},
                    {"type": "finish", "finishReason": "error"},
                ]

    def close(self) -> list[Chunk]:
        """Chunks that end a stream whose events stopped without `done` or `error`."""
        if self.finished:
            return []
        self.finished = True
        return [*self._close_step(), {"type": "finish", "finishReason": "other"}]


async def ui_chunks(events: AsyncIterator[TurnEvent]) -> AsyncIterator[Chunk]:
    """The UI message chunks of a turn's events, up to `done` (the last event)."""
    encoder = UiChunkEncoder()
    async for event in events:
        for chunk in encoder.encode(event):
            yield chunk
        if isinstance(event, DoneEvent):
            break
    for chunk in encoder.close():
        yield chunk


async def _body(events: AsyncGenerator[TurnEvent, None]) -> AsyncGenerator[bytes, None]:
    # Closing this generator (a disconnect, even mid-send) closes the turn's stream at once,
    # which cancels the turn, rather than leaving it to the garbage collector. After `done`
    # the empty chunk ends the body first; closing the turn's stream then waits for the
    # turn's bookkeeping (app/agent/streaming.py).
    async with contextlib.aclosing(events) as stream:
        async for chunk in ui_chunks(stream):
            yield sse_data(json_text(chunk))
        yield sse_data("[DONE]")
        yield b""


def ui_message_response(
    events: AsyncGenerator[TurnEvent, None], *, max_seconds: float
) -> EventStreamResponse:
    """The turn as a UI message stream. A disconnect cancels `events` (the response listens for
    it on every ASGI version), so the turn's own cancellation path discards its staged memory;
    a client that stops reading is gone after the send timeout, as on the other streams."""
    return EventStreamResponse(
        _body(events),
        headers=HEADERS,
        sep="\n",
        send_timeout=SEND_TIMEOUT_SECONDS,
        max_seconds=max_seconds,
    )


def _text_of(message: Mapping[str, Any]) -> str:
    parts = message.get("parts")
    if not isinstance(parts, list):
        # AI SDK 4 messages carried `content`; accept it so older clients still work.
        content = message.get("content")
        return content if isinstance(content, str) else ""
    texts = [
        part["text"]
        for part in parts
        if isinstance(part, Mapping)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    ]
    return "\n".join(texts)


def _conversation_from_history(messages: list[Any]) -> str | None:
    """The conversation this chat continues: the server put it in each answer's metadata."""
    for message in reversed(messages):
        if not isinstance(message, Mapping) or message.get("role") != "assistant":
            continue
        metadata = message.get("metadata")
        if isinstance(metadata, Mapping) and isinstance(metadata.get("conversation_id"), str):
            return str(metadata["conversation_id"])
    return None


def parse_ui_request(body: Any) -> tuple[str, str | None]:
    """`(message, conversation_id)` from a `useChat` body or from the plain chat body.

    `useChat` posts `{id, messages: [{role, parts: [{type: "text", text}]}], trigger, ...}`.
    The turn's text is the last user message; earlier messages are ignored because the server
    keeps the transcript. The conversation is `conversation_id` in the body when the client sets
    it (useChat's `body` option), else the one the server named in the last answer's metadata;
    useChat's own chat `id` is a client-side name and is not used.
    """
    if not isinstance(body, Mapping):
        raise not_object()
    explicit = body.get("conversation_id")
    if explicit is not None and not isinstance(explicit, str):
        raise Unprocessable("conversation_id must be a string.")
    if isinstance(body.get("message"), str):
        return str(body["message"]), explicit
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise Unprocessable("The body needs `message` or a `messages` list (AI SDK useChat).")
    last_user = next(
        (m for m in reversed(messages) if isinstance(m, Mapping) and m.get("role") == "user"),
        None,
    )
    if last_user is None:
        raise Unprocessable("`messages` has no user message.")
    text = _text_of(last_user)
    if not text.strip():
        raise Unprocessable("The last user message has no text part.")
    return text, explicit or _conversation_from_history(messages)


def ui_replacement(body: Any) -> str | AfterTurn | None:
    """The turn a `useChat` request replaces, when it regenerates an answer or edits a message
    (`trigger` with `messageId`, as the AI SDK's Chat sends them); None for a new turn.

    - `regenerate()` naming an answer of ours (`msg_<turn id>`): that turn.
    - `regenerate()` with no id (the last answer), or `sendMessage({messageId})` (an edited
      user message): the client has dropped that answer or message, so the list ends with the
      user's message after the last answer it kept; the replaced turn is the one after that
      answer's turn on the server (AfterTurn), the conversation's first with no answer kept.
    """
    if not isinstance(body, Mapping) or not isinstance(body.get("messages"), list):
        return None
    trigger, message_id, kept = body.get("trigger"), body.get("messageId"), body["messages"]
    if trigger == "regenerate-message":
        if isinstance(message_id, str) and message_id.startswith(ANSWER_ID_PREFIX):
            return message_id.removeprefix(ANSWER_ID_PREFIX)
    elif trigger != "submit-message" or not _is_edit(kept, message_id):
        return None
    answers = [
        message.get("id")
        for message in kept[: _last_user_index(kept)]
        if isinstance(message, Mapping) and message.get("role") == "assistant"
    ]
    if not answers:
        return AfterTurn(None)
    last = answers[-1]
    if isinstance(last, str) and last.startswith(ANSWER_ID_PREFIX):
        return AfterTurn(last.removeprefix(ANSWER_ID_PREFIX))
    return None  # an answer the server did not make: nothing of ours to replace


def _is_edit(messages: list[Any], message_id: Any) -> bool:
    """An edited message is sent last, under its own id (anything else that names a message,
    such as a tool approval's continuation, is not an edit)."""
    last = messages[-1] if messages else None
    return (
        isinstance(message_id, str)
        and isinstance(last, Mapping)
        and last.get("role") == "user"
        and last.get("id") == message_id
    )


def _last_user_index(messages: list[Any]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, Mapping) and message.get("role") == "user":
            return index
    return 0
