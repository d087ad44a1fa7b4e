"""The built-in offline model: a deterministic OpenAI-compatible chat-completions endpoint.

The same replies are served two ways: in process, through `ChatCompletionsTransport` (an httpx
transport handed to `AsyncOpenAI`, so the production client code path is exercised end to end),
and over HTTP by `scripts/offline_model.py`. The transport streams its body chunk by chunk (an
`httpx.ASGITransport` would buffer it), so text reaches the client word by word.

Tests reuse the transport with scripted replies (`tests/support/scripted.py`); the reply types
below therefore include failure modes: an HTTP error, a stream that breaks midway and a hang.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from app.memory.render import CLOSE_TAG, OPEN_TAG
from app.memory.rules import SEPARATOR

OFFLINE_MODEL_NAME = "offline-memory-1"
MEMORY_TOOL = "memory_update"
# Generation options a request may carry; recorded for tests, ignored by the canned answers.
SAMPLING_KEYS = ("max_tokens", "temperature", "top_p", "presence_penalty", "frequency_penalty",
                 "seed", "stop")

# -- replies (what a model answers to one request) -------------------------------------------


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


@dataclass(frozen=True)
class HttpError:
    status: int = 500
    message: str = "scripted upstream failure"


@dataclass(frozen=True)
class BrokenStream:
    """Streams `text` word by word, then the connection breaks (no finish, no [DONE])."""

    text: str = ""


@dataclass(frozen=True)
class Hang:
    """Never answers: the caller's timeout or cancellation must end the request."""


Reply = Text | ToolCalls | HttpError | BrokenStream | Hang


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
            _content_text(message.get("content"))
            for message in self.messages
            if message.get("role") in ("system", "developer")
        )


Responder = Callable[[ChatRequest], Awaitable[Reply]]


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


# -- the deterministic brain -------------------------------------------------------------------

OFFLINE_NOTICE = (
    "This is the built-in offline model, so my answers are canned. "
    "To talk to a real model, set LLM_BASE_URL, LLM_API_KEY and LLM_MODEL "
    "to any OpenAI-compatible chat-completions endpoint."
)
LONG_ANSWER = " ".join(
    f"Sentence {number} of a deliberately long offline answer, streamed word by word so that "
    "you can press Stop halfway and watch the turn end without saving anything."
    for number in range(1, 31)
)

_REMEMBER = re.compile(r"^(?:please\s+)?remember(?:\s+that)?[\s:,]+(?P<rest>.+)$", re.I | re.S)
_I_CLAUSE = re.compile(r"^i\s+(?P<rest>.+)$", re.I | re.S)
_NAME = re.compile(r"\bmy name is\s+(?P<name>[^.!?\n]+)", re.I)
_FORGET = re.compile(
    r"^(?:please\s+)?forget(?:\s+(?:that|about|the fact that))?\s+(?P<phrase>.+)$", re.I | re.S
)
_HEADING = re.compile(r"^(USER PROFILE|AGENT MEMORY) \[.*\]$", re.M)
_IRREGULAR = {"am": "is", "have": "has", "do": "does", "go": "goes", "was": "was", "can": "can",
              "will": "will", "would": "would", "should": "should", "must": "must"}
_PRONOUNS = {"my": "their", "me": "them", "myself": "themselves", "mine": "theirs", "i": "they",
             "i'm": "they are"}


def memory_entries(system_text: str) -> dict[str, list[str]]:
    """The entries of the memory block in a system prompt (empty when there is no block)."""
    entries: dict[str, list[str]] = {"user": [], "memory": []}
    start, end = system_text.find(OPEN_TAG), system_text.find(CLOSE_TAG)
    if start < 0 or end < start:
        return entries
    block = system_text[start + len(OPEN_TAG) : end]
    headings = list(_HEADING.finditer(block))
    for position, heading in enumerate(headings):
        stop = headings[position + 1].start() if position + 1 < len(headings) else len(block)
        body = block[heading.end() : stop].strip("\n")
        target = "user" if heading.group(1) == "USER PROFILE" else "memory"
        entries[target] = [entry for entry in body.split(SEPARATOR) if entry.strip()]
    return entries


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".!?").strip()
    return (text[:1].upper() + text[1:] + ".") if text else ""


def _third_person(clause: str) -> str:
    """'prefer short answers' -> 'prefers short answers' (with my/me -> their/them)."""
    words = clause.strip().split()
    if not words:
        return ""
    verb = words[0].lower()
    if verb in _IRREGULAR:
        words[0] = _IRREGULAR[verb]
    elif re.search(r"(s|sh|ch|x|z|o)$", verb):
        words[0] = verb + "es"
    elif re.search(r"[^aeiou]y$", verb):
        words[0] = verb[:-1] + "ies"
    else:
        words[0] = verb + "s"
    rest = [_PRONOUNS.get(word.lower(), word) for word in words[1:]]
    return " ".join([words[0], *rest])


def _user_fact(text: str) -> str | None:
    """A fact about the user in the third person, or None when the text is not one."""
    name = _NAME.search(text)
    if name:
        return _sentence(f"The user's name is {name.group('name').strip()}")
    clause = _I_CLAUSE.match(text.strip())
    if clause:
        return _sentence("The user " + _third_person(clause.group("rest")))
    return None


def _called_remove(message: Mapping[str, Any]) -> bool:
    """Whether the assistant's tool call before a result removed an entry (to word the reply)."""
    for call in message.get("tool_calls") or ():
        try:
            arguments = json.loads(call.get("function", {}).get("arguments") or "{}")
        except ValueError:
            continue
        operations = arguments.get("operations") if isinstance(arguments, dict) else None
        if any(isinstance(op, dict) and op.get("action") == "remove" for op in operations or ()):
            return True
    return False


class OfflineModel:
    """Reads the system prompt it is given and the last message; answers deterministically."""

    async def __call__(self, request: ChatRequest) -> Reply:
        return self.reply(request)

    def reply(self, request: ChatRequest) -> Reply:
        last = request.messages[-1] if request.messages else {}
        if last.get("role") == "tool":
            removed = _called_remove(request.messages[-2] if len(request.messages) > 1 else {})
            return Text(self._after_tool(_content_text(last.get("content")), removed))
        text = _content_text(last.get("content")).strip()
        lowered = text.lower()
        can_write = MEMORY_TOOL in request.tool_names
        entries = memory_entries(request.system_text())

        if "what do you remember" in lowered:
            return Text(self._recall(entries))
        forget = _FORGET.match(text)
        if forget:
            return self._forget(forget.group("phrase"), entries, can_write, request)
        remember = _REMEMBER.match(text)
        if remember:
            rest = remember.group("rest")
            fact = _user_fact(rest)
            if fact is not None:
                return self._save("user", fact, can_write, request)
            return self._save("memory", _sentence(rest), can_write, request)
        if re.match(r"^i prefer\b", lowered) or _NAME.search(text):
            fact = _user_fact(text)
            if fact is not None:
                return self._save("user", fact, can_write, request)
        if "long" in lowered or "story" in lowered:
            return Text(LONG_ANSWER)
        return Text(OFFLINE_NOTICE)

    @staticmethod
    def _call_id(request: ChatRequest) -> str:
        done = sum(1 for message in request.messages if message.get("role") == "tool")
        return f"call_offline_{done + 1}"

    def _save(self, target: str, fact: str, can_write: bool, request: ChatRequest) -> Reply:
        if not can_write:
            return Text("Memory is switched off here, so I cannot save that.")
        operation = {"target": target, "action": "add", "content": fact}
        return ToolCalls(
            (ToolCall(MEMORY_TOOL, {"operations": [operation]}, self._call_id(request)),)
        )

    def _forget(
        self, phrase: str, entries: dict[str, list[str]], can_write: bool, request: ChatRequest
    ) -> Reply:
        needle = phrase.strip().rstrip(".!?").strip()
        needles = [needle.lower()]
        clause = _I_CLAUSE.match(needle)
        if clause:  # "I prefer tea" is stored as "The user prefers tea."
            needles.append(_third_person(clause.group("rest")).lower())
        needles.append(re.sub(r"\bmy\b", "user's", needle, flags=re.I).lower())
        for target in ("user", "memory"):
            for entry in entries[target]:
                if any(candidate and candidate in entry.lower() for candidate in needles):
                    if not can_write:
                        return Text("Memory is switched off here, so I cannot change it.")
                    operation = {"target": target, "action": "remove", "match": entry}
                    return ToolCalls(
                        (ToolCall(MEMORY_TOOL, {"operations": [operation]},
                                  self._call_id(request)),)
                    )
        return Text("I have nothing in memory that matches that, so there is nothing to forget.")

    @staticmethod
    def _recall(entries: dict[str, list[str]]) -> str:
        remembered = entries["user"] + entries["memory"]
        if not remembered:
            return "I do not remember anything yet."
        return "Here is what I remember: " + " ".join(
            entry if entry.endswith((".", "!", "?")) else entry + "." for entry in remembered
        )

    @staticmethod
    def _after_tool(result: str, removed: bool) -> str:
        try:
            payload = json.loads(result)
        except ValueError:
            payload = {}
        status = payload.get("status") if isinstance(payload, dict) else None
        if status == "staged":
            return "Forgotten." if removed else "Saved."
        if status == "rejected":
            return f"I could not save that: {payload.get('reason', 'it was rejected')}"
        if status == "unavailable":
            return "Memory is unavailable, nothing was saved."
        return "Done."


# -- the wire format ---------------------------------------------------------------------------


def words(text: str) -> list[str]:
    """Pieces that concatenate back to `text`: each word with the whitespace after it."""
    pieces = re.findall(r"\s*\S+\s*", text)
    return pieces or ([text] if text else [])


def _split(text: str, parts: int) -> list[str]:
    size = max(1, -(-len(text) // parts))
    return [text[index : index + size] for index in range(0, len(text), size)] or [""]


def _usage(request: ChatRequest, output: str) -> dict[str, int]:
    prompt = sum(len(_content_text(m.get("content")).split()) for m in request.messages)
    completion = len(output.split())
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


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


async def stream_body(
    request: ChatRequest, reply: Text | ToolCalls | BrokenStream, delay_seconds: float
) -> AsyncIterator[bytes]:
    """The server-sent-event chunks of a streamed completion, paced by `delay_seconds`."""
    ids = _Ids()
    model = request.model or OFFLINE_MODEL_NAME
    yield _chunk(ids, model, {"role": "assistant", "content": ""})
    text = reply.text
    for position, piece in enumerate(words(text)):
        if position and delay_seconds:
            await asyncio.sleep(delay_seconds)
        yield _chunk(ids, model, {"content": piece})
    if isinstance(reply, BrokenStream):
        raise httpx.RemoteProtocolError("offline model: the stream broke midway")
    finish = reply.finish_reason if isinstance(reply, Text) else "tool_calls"
    output = text
    if isinstance(reply, ToolCalls):
        for index, call in enumerate(_tool_call_dicts(reply)):
            function = call["function"]
            output += function["arguments"]
            yield _chunk(ids, model, {"tool_calls": [{
                "index": index, "id": call["id"], "type": "function",
                "function": {"name": function["name"], "arguments": ""},
            }]})
            for piece in _split(function["arguments"], 3):
                if delay_seconds:
                    await asyncio.sleep(delay_seconds)
                yield _chunk(ids, model, {"tool_calls": [{
                    "index": index, "function": {"arguments": piece},
                }]})
    yield _chunk(ids, model, {}, finish)
    if request.include_usage:
        usage = {
            "id": ids.completion, "object": "chat.completion.chunk", "created": ids.created,
            "model": model, "choices": [], "usage": _usage(request, output),
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
        "usage": _usage(request, output),
    }


def error_body(reply: HttpError) -> dict[str, Any]:
    return {"error": {"message": reply.message, "type": "server_error", "code": None}}


# -- the in-process transport ------------------------------------------------------------------


class AsyncIteratorStream(httpx.AsyncByteStream):
    """A streaming httpx body from an async iterator; closing it closes the iterator."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._chunks:
            yield chunk

    async def aclose(self) -> None:
        closer = getattr(self._chunks, "aclose", None)
        if closer is not None:
            await closer()


class ChatCompletionsTransport(httpx.AsyncBaseTransport):
    """Answers `POST .../chat/completions` in process with the replies of `responder`."""

    def __init__(self, responder: Responder, *, delay_seconds: float = 0.0) -> None:
        self.responder = responder
        self.delay_seconds = delay_seconds

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": "not found"}})
        body = json.loads(await request.aread())
        chat = ChatRequest.from_body(body)
        return await self.respond(chat, await self.responder(chat))

    async def respond(self, chat: ChatRequest, reply: Reply) -> httpx.Response:
        """The HTTP response that serves `reply` to `chat` (streamed when it asked for a stream)."""
        if isinstance(reply, Hang):
            await asyncio.Event().wait()  # until the caller gives up
            raise AssertionError("unreachable")
        if isinstance(reply, HttpError):
            return httpx.Response(reply.status, json=error_body(reply))
        if chat.stream:
            return httpx.Response(
                200,
                headers={"content-type": "text/event-stream"},
                stream=AsyncIteratorStream(stream_body(chat, reply, self.delay_seconds)),
            )
        if isinstance(reply, BrokenStream):
            raise httpx.RemoteProtocolError("offline model: the connection broke")
        return httpx.Response(200, json=completion_body(chat, reply))


def offline_transport(delay_ms: int) -> ChatCompletionsTransport:
    return ChatCompletionsTransport(OfflineModel(), delay_seconds=delay_ms / 1000)
