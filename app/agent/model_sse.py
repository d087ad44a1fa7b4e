"""The model's server-sent events read without the SDK's per-chunk models: the `data` of each
event as a plain dict, decoded as the WHATWG event-stream rules (and the SDK's decoder) do.

The body is read as bytes and split into lines by `EventStream`, plain calls made from the one
generator that also parses the chunks: an idle turn waits inside that generator, so every
generator stacked under it (httpx's text and line iterators, each with its decoder and request
context) would be memory that every open stream holds."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

DONE = "[DONE]"
_LINE_END = re.compile(rb"\r\n|\r|\n")


# The default bound on one line, and on one event's data, in bytes (LLM_MAX_EVENT_BYTES).
MAX_EVENT_BYTES = 1_048_576


class EventStream:
    """Bytes in, the `data` of each finished event out (multi-line data joined by newlines);
    comments, `event`, `id` and `retry` fields are read past, an event without data is skipped.
    Lines end with CRLF, LF or CR, and are decoded as UTF-8 once whole (no line break is ever
    inside a character), so the bytes may be cut anywhere.

    Linear and bounded: each piece is searched for line ends once, and an unfinished line is
    kept as a list of its pieces, joined once when it ends (re-joining it on every piece was
    quadratic: one 16 MiB line held the event loop for seconds). A line, or an event's data,
    longer than `max_bytes` raises `StreamError` as soon as it gets there."""

    __slots__ = ("cr", "data", "data_bytes", "max_bytes", "parts", "pending", "size")

    def __init__(self, max_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_bytes = max_bytes
        self.data: list[str] = []
        self.data_bytes = 0
        self.pending = False
        self.parts: list[bytes] = []  # the unfinished line's pieces
        self.size = 0  # their length
        self.cr = False  # the last piece ended with a CR, which may be half of a CRLF

    def feed(self, piece: bytes) -> list[str]:
        if self.cr:
            piece, self.cr = b"\r" + piece, False
        if piece.endswith(b"\r"):
            piece, self.cr = piece[:-1], True
        lines = _LINE_END.split(piece)
        tail = lines.pop()
        found: list[str] = []
        for line in lines:
            if self.parts:
                line = b"".join((*self.parts, line))
                self.parts, self.size = [], 0
            self._check(len(line))
            if (data := self._line(line)) is not None:
                found.append(data)
        if tail:
            self._check(self.size + len(tail))
            self.parts.append(tail)
            self.size += len(tail)
        return found

    def end(self) -> list[str]:
        """At the end of the body: its unfinished line, then an event left without the blank
        line after it (the SDK's decoder yields it too)."""
        found: list[str] = []
        rest = b"".join(self.parts)
        if self.cr:
            found.extend(self.feed(b"\n"))  # the held CR ends its line
            rest = b""
        elif rest and (data := self._line(rest)) is not None:
            found.append(data)
        self.parts, self.size, self.cr = [], 0, False
        if (data := self._dispatch()) is not None:
            found.append(data)
        return found

    def _check(self, size: int) -> None:
        if size > self.max_bytes:
            raise StreamError(f"a line of the model's stream exceeds {self.max_bytes} bytes")

    def _line(self, raw: bytes) -> str | None:
        if not raw:
            return self._dispatch()
        line = raw.decode("utf-8", "replace")
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if name == "data":
            self.data_bytes += len(raw)
            if self.data_bytes > self.max_bytes:
                raise StreamError(f"an event of the model's stream exceeds {self.max_bytes} bytes")
            self.data.append(value[1:] if value.startswith(" ") else value)
            self.pending = True
        return None

    def _dispatch(self) -> str | None:
        finished = "\n".join(self.data) if self.pending else None
        self.data, self.data_bytes, self.pending = [], 0, False
        return finished


async def chunks(
    body: AsyncIterator[bytes], max_event_bytes: int = MAX_EVENT_BYTES
) -> AsyncIterator[Any]:
    """Each chunk as parsed JSON, up to `[DONE]` (the rest is read, so the connection can be
    reused, but not parsed). An event carrying `error`, data that is not JSON, or a line or
    event longer than `max_event_bytes` raises `StreamError`, as the SDK's stream does for
    the first."""
    events = EventStream(max_event_bytes)
    done = False
    async for piece in body:
        if done:
            continue
        for data in events.feed(piece):
            if done := data.startswith(DONE):
                break
            yield _checked(data)
    for data in () if done else events.end():
        if data.startswith(DONE):
            break
        yield _checked(data)


def _checked(data: str) -> Any:
    # A function of its own, so the suspended generator above holds no parsed chunk.
    try:
        chunk = json.loads(data)
    except (ValueError, RecursionError):
        raise StreamError("the model sent data that is not JSON") from None
    if not isinstance(chunk, dict):
        raise StreamError("the model sent a chunk that is not a JSON object")
    if chunk.get("error"):
        raise StreamError("the model sent an error event")
    return chunk


class StreamError(Exception):
    """The model reported an error inside its stream, or the stream is not one we read."""
