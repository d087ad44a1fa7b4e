"""The ids bound to log lines for a request or a turn are put back as they were when it ends,
however it ends: a key the scope bound is gone after it, a key bound before it has its
earlier value again, and keys it did not bind are left alone."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import nullcontext

import pytest
import structlog
from starlette.types import Message, Receive, Scope, Send

from app.api.middleware import RequestIdMiddleware
from app.telemetry import turn_context
from app.telemetry.subjects import subject_hash


@pytest.fixture(autouse=True)
def clean_context() -> Iterator[None]:
    structlog.contextvars.clear_contextvars()
    yield
    structlog.contextvars.clear_contextvars()


def bound() -> dict[str, object]:
    return structlog.contextvars.get_contextvars()


@pytest.mark.parametrize("fails", [False, True])
def test_a_turn_context_is_undone_when_the_turn_ends(fails: bool) -> None:
    structlog.contextvars.bind_contextvars(subject_hash="earlier", request_id="r1")
    seen: dict[str, object] = {}
    with (
        pytest.raises(RuntimeError) if fails else nullcontext(),
        turn_context("turn-1", "someone"),
    ):
        seen = bound()
        structlog.contextvars.bind_contextvars(other="inside")  # not the scope's key
        if fails:
            raise RuntimeError("the turn failed")
    assert seen == {
        "subject_hash": subject_hash("someone"),
        "request_id": "r1",
        "turn_id": "turn-1",
    }
    assert bound() == {"subject_hash": "earlier", "request_id": "r1", "other": "inside"}


def test_a_turn_context_without_a_subject_keeps_the_bound_one() -> None:
    structlog.contextvars.bind_contextvars(subject_hash="earlier")
    with turn_context("turn-1"):
        assert bound() == {"subject_hash": "earlier", "turn_id": "turn-1"}
    assert bound() == {"subject_hash": "earlier"}


@pytest.mark.parametrize("fails", [False, True])
def test_a_request_id_is_bound_for_the_request_only(fails: bool) -> None:
    seen: list[dict[str, object]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(bound())
        structlog.contextvars.bind_contextvars(subject_hash="the caller")  # as authentication does
        if fails:
            raise RuntimeError("the route failed")
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(_message: Message) -> None:
        return None

    async def request() -> dict[str, object]:
        structlog.contextvars.bind_contextvars(request_id="outer")
        scope: Scope = {"type": "http", "headers": [(b"x-request-id", b"req-1")]}
        try:
            await RequestIdMiddleware(app)(scope, receive, send)
        except RuntimeError:
            assert fails
        return bound()

    after = asyncio.run(request())
    assert seen == [{"request_id": "req-1"}]
    assert after == {"request_id": "outer", "subject_hash": "the caller"}
