"""Reading real server-sent events from a live server with httpx, for chat tests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class Event:
    event: str
    data: dict[str, Any]


class _Parser:
    """The SSE line protocol: `event:`/`data:` fields, a blank line dispatches, `:` is a comment."""

    def __init__(self) -> None:
        self.name = "message"
        self.data: list[str] = []

    def feed(self, line: str) -> Event | None:
        if not line:
            if not self.data:
                self.name = "message"
                return None
            event = Event(self.name, json.loads("\n".join(self.data)))
            self.name, self.data = "message", []
            return event
        if line.startswith(":"):
            return None  # keep-alive ping
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            self.name = value
        elif field == "data":
            self.data.append(value)
        return None


def iter_events(response: httpx.Response) -> Iterator[Event]:
    parser = _Parser()
    for line in response.iter_lines():
        event = parser.feed(line)
        if event is not None:
            yield event


async def aiter_events(response: httpx.Response) -> AsyncIterator[Event]:
    parser = _Parser()
    async for line in response.aiter_lines():
        event = parser.feed(line)
        if event is not None:
            yield event


def names(events: Iterable[Event]) -> list[str]:
    return [event.event for event in events]


def first(events: Iterable[Event], name: str) -> Event:
    return next(event for event in events if event.event == name)


def text_of(events: Iterable[Event]) -> str:
    return "".join(event.data["text"] for event in events if event.event == "delta")


def without_deltas(events: Iterable[Event]) -> list[str]:
    """Event names with runs of `delta` collapsed to one, for exact order assertions."""
    collapsed: list[str] = []
    for event in events:
        if event.event == "delta" and collapsed and collapsed[-1] == "delta":
            continue
        collapsed.append(event.event)
    return collapsed


def post_chat(
    base_url: str,
    headers: dict[str, str],
    body: dict[str, Any],
    *,
    path: str = "/v1/chat",
    timeout: float = 30.0,
) -> tuple[httpx.Response, list[Event]]:
    """POST a turn and read its whole event stream (a non-200 answer yields no events)."""
    with (
        httpx.Client(base_url=base_url, timeout=timeout) as client,
        client.stream("POST", path, json=body, headers=headers) as response,
    ):
        if response.status_code != 200:
            response.read()
            return response, []
        return response, list(iter_events(response))


async def apost_chat(
    client: httpx.AsyncClient,
    headers: dict[str, str],
    body: dict[str, Any],
    *,
    path: str = "/v1/chat",
) -> list[Event]:
    async with client.stream("POST", path, json=body, headers=headers) as response:
        assert response.status_code == 200, (response.status_code, await response.aread())
        return [event async for event in aiter_events(response)]
