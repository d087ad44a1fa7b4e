"""The service with a stopwatch: `app.main:app` wrapped so that each `POST /v1/chat` records when
its phases start and end, for `turn_timeline.py`. Only for the benchmark: it patches the phase
functions in this process (authentication, the turn's start with its memory read and message
write, the model request and its first text, the answer's transcript row, the SSE writes).

    uvicorn scripts.bench.timeline_app:app   (the service's usual settings in the environment)

On SIGUSR2 it writes the median time of every mark, in ms from the request's arrival, to the
JSON file named by TIMELINE_OUT (the first TIMELINE_SKIP requests are left out as warm-up).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import os
import signal
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import app.agent.opening as opening
import app.agent.turn as turn
import app.api.deps as deps
import app.conversations.service as conversations
import app.memory.service as memory
import app.operators.limits as limits
from app.agent import llm
from app.main import app as service

Marks = dict[str, float]
_current: contextvars.ContextVar[Marks | None] = contextvars.ContextVar("marks", default=None)
_requests: list[Marks] = []


CPU = "CPU: "


def mark(name: str) -> None:
    """The first time `name` happens in the current request (worker threads see it too)."""
    marks = _current.get()
    if marks is not None and name not in marks:
        marks[name] = time.perf_counter()


def spent(name: str, seconds: float) -> None:
    """The CPU a call of a worker thread spent, kept beside the marks under "CPU: <name>"."""
    marks = _current.get()
    if marks is not None:
        marks[f"{CPU}{name}"] = seconds


def timed(owner: Any, attribute: str, name: str) -> None:
    """Mark when `owner.attribute` (a coroutine function or a plain one) starts and ends."""
    original = getattr(owner, attribute)
    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            mark(f"{name} starts")
            try:
                return await original(*args, **kwargs)
            finally:
                mark(f"{name} ends")

        setattr(owner, attribute, wrapper)
        return

    @functools.wraps(original)
    def plain(*args: Any, **kwargs: Any) -> Any:
        mark(f"{name} starts")
        cpu = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            mark(f"{name} ends")
            spent(name, time.thread_time() - cpu)

    setattr(owner, attribute, plain)


timed(deps, "authenticate", "authentication")
timed(limits.LimitStore, "admit", "admission")
timed(limits.LimitStore, "_admit", "admission, in its thread")
timed(
    limits.LimitStore,
    "_admitting",
    "admission with the message, then the memory read, in its thread",
)
timed(turn, "open_turn", "turn start (memory read, then message write)")
timed(opening, "_load_memory", "memory read")
timed(opening, "_store_message", "message write")
timed(memory.MemoryService, "read", "memory read, in its thread")
timed(conversations.ConversationService, "_create", "message write, in its thread")
timed(conversations.ConversationService, "_append", "answer row, in its thread")
timed(turn.Turn, "_store_answer", "answer row")

_stream = llm.ModelClient._stream


async def _timed_stream(
    self: llm.ModelClient, model: str, messages: Any, tools: Any, on_text: Any, options: Any
) -> llm.RoundResult:
    mark("model request starts")

    def first_text(text: str) -> None:
        mark("model's first text")
        on_text(text)

    try:
        return await _stream(self, model, messages, tools, first_text, options)
    finally:
        mark("model stream ends")


llm.ModelClient._stream = _timed_stream  # type: ignore[method-assign]

Send = Callable[[dict[str, Any]], Awaitable[None]]


async def app(scope: dict[str, Any], receive: Any, send: Send) -> None:
    if scope["type"] != "http" or scope["path"] != "/v1/chat":
        await service(scope, receive, send)
        return
    marks: Marks = {"request arrives": time.perf_counter()}
    _current.set(marks)

    async def watched(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            mark("response starts")
        elif message["type"] == "http.response.body":
            body = message.get("body", b"")
            for event in (b"start", b"delta", b"memory", b"done"):
                if b"event: " + event in body:
                    mark(f"SSE {event.decode()} sent")
            if not message.get("more_body", False):
                mark("SSE body's end sent")
        await send(message)

    try:
        await service(scope, receive, watched)
    finally:
        mark("response ends")
        _requests.append(marks)


def _write(_signal: int, _frame: Any) -> None:
    skip = int(os.environ.get("TIMELINE_SKIP", "20"))
    measured = _requests[skip:]
    names = {name for marks in measured for name in marks}

    def median_ms(name: str, since: str | None) -> float:
        values = [
            marks[name] - (marks[since] if since else 0) for marks in measured if name in marks
        ]
        return round(statistics.median(values) * 1000, 3)

    moments = {n: median_ms(n, "request arrives") for n in names if not n.startswith(CPU)}
    cpu = {n.removeprefix(CPU): median_ms(n, None) for n in names if n.startswith(CPU)}
    ordered = dict(sorted(moments.items(), key=lambda item: item[1]))
    Path(os.environ["TIMELINE_OUT"]).write_text(
        json.dumps(
            {"requests": len(measured), "median_ms": ordered, "cpu_median_ms": cpu}, indent=2
        )
    )


signal.signal(signal.SIGUSR2, _write)
