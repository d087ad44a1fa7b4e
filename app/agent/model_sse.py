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


class EventStream:
    """Bytes in, the `data` of each finished event out (multi-line data joined by newlines);
    comments, `event`, `id` and `retry` fields are read past, an event without data is skipped.
    Lines end with CRLF, LF or CR, and are decoded as UTF-8 once whole (no line break is ever
    inside a character), so the bytes may be cut anywhere."""

    __slots__ = ("data", "pending", "rest")

    def __init__(self) -> None:
        self.data: list[str] = []
        self.pending = False
        self.rest = b""  # an unfinished line; a CR at the end may be half of a CRLF

    def feed(self, piece: bytes) -> list[str]:
        buffer = self.rest + piece
        whole, self.rest = (buffer[:-1], b"\r") if buffer.endswith(b"\r") else (buffer, b"")
        lines = _LINE_END.split(whole)
        self.rest = lines.pop() + self.rest
        return [data for line in lines if (data := self._line(line)) is not None]

    def end(self) -> list[str]:
        """At the end of the body: its unfinished line, then an event left without the blank
        line after it (the SDK's decoder yields it too)."""
        found: list[str] = []
        if self.rest and (data := self._line(self.rest.removesuffix(b"\r"))) is not None:
            found.append(data)
        self.rest = b""
        if (data := self._dispatch()) is not None:
            found.append(data)
        return found

    def _line(self, raw: bytes) -> str | None:
        if not raw:
            return self._dispatch()
        line = raw.decode("utf-8", "replace")
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if name == "data":
            self.data.append(value[1:] if value.startswith(" ") else value)
            self.pending = True
        return None

    def _dispatch(self) -> str | None:
        finished = "\n".join(self.data) if self.pending else None
        self.data, self.pending = [], False
        return finished


async def chunks(body: AsyncIterator[bytes]) -> AsyncIterator[Any]:
    """Each chunk as parsed JSON, up to `[DONE]` (the rest is read, so the connection can be
    reused, but not parsed). An event carrying `error` raises `StreamError`, as the SDK's
    stream does."""
    events = EventStream()
    done = False
    async for piece in body:
        if done:
            continue
        for data in events.feed(piece):
            if done := data.startswith(DONE):
                break
            yield _checked(json.loads(data))
    for data in () if done else events.end():
        if data.startswith(DONE):
            break
        yield _checked(json.loads(data))


def _checked(chunk: Any) -> Any:
    # A function of its own, so the suspended generator above holds no parsed chunk.
    if isinstance(chunk, dict) and chunk.get("error"):
        raise StreamError("the model sent an error event")
    return chunk


class StreamError(Exception):
    """The model reported an error inside its stream."""
