"""A client of `/openai/v1` that goes away before the answer ends commits nothing, on every
dialect: a stream closed mid-answer, and a plain (non-streamed) request abandoned while the
turn runs. The model stages an edit, then streams an answer held before its finishing chunk;
with the client still there (the control) the same script commits, so only the cut prevents it.
Cuts are driven by gates the test opens, never by sleeps."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Engine

from app.main import create_app
from app.memory.rules import Snapshot
from tests.support.apps import api_settings
from tests.support.databases import stored
from tests.support.gates import Gates
from tests.support.openai_sdk import MODEL, async_sdk, sdk, user_says
from tests.support.scripted import HeldText, ScriptedModel, memory_call
from tests.support.server import live_server
from tests.support.waiting import await_for, wait_for
from tests.telemetry.capture import RecordingHandler

FACT = {"target": "user", "action": "add", "content": "The user keeps bees on the roof."}
ANSWER = "Saved. Bees on the roof, got it: I will remember that."


@contextmanager
def server(db_url: str, model: ScriptedModel) -> Iterator[str]:
    app = create_app(api_settings(db_url), model_transport=model.transport())
    with live_server(app) as url:
        yield url


@pytest.fixture
def access_statuses() -> Iterator[Callable[[], list[int]]]:
    """The statuses of the completions route's `http.request` access events."""
    handler = RecordingHandler()
    root = logging.getLogger()
    root.addHandler(handler)

    def statuses() -> list[int]:
        return [
            int(record.msg["status"])
            for record in list(handler.records)
            if isinstance(record.msg, dict)
            and record.msg.get("event") == "http.request"
            and record.msg.get("route") == "/openai/v1/chat/completions"
        ]

    try:
        yield statuses
    finally:
        root.removeHandler(handler)


def held_script(gates: Gates) -> ScriptedModel:
    return ScriptedModel([memory_call(FACT), HeldText(ANSWER, gates, "answer")])


@pytest.mark.parametrize("cut", [False, True], ids=["control-stays", "closes-mid-answer"])
def test_a_stream_closed_mid_answer_commits_nothing(engine: Engine, db_url: str, cut: bool) -> None:
    """The client reads the first piece of the answer; the server holds the model before its
    last chunk; the client closes the stream. The server cancels the held turn (the gate sees
    it abandoned); opening the gate afterwards lets nothing through and nothing is stored. In
    the control the client stays, the gate opens, the whole answer arrives and the edit lands."""
    gates = Gates()
    model = held_script(gates)
    user = f"stream-cut-{uuid.uuid4().hex[:8]}"
    received: list[str] = []
    with server(db_url, model) as url, sdk(url, user) as client:
        with client.chat.completions.create(
            model=MODEL, messages=user_says("Remember: I keep bees."), stream=True
        ) as stream:
            for chunk in stream:
                piece = chunk.choices[0].delta.content if chunk.choices else None
                if not piece:
                    continue
                received.append(piece)
                if not cut:
                    gates.release("answer")
                    continue
                wait_for(lambda: "answer" in gates.held, "the answer held at its last chunk")
                break  # leaving the `with` closes the connection
        if cut:
            wait_for(lambda: "answer" in gates.abandoned, "the server cancelling the turn")
            gates.release("answer")  # the model would finish now, if the turn were alive
    if not cut:
        assert "".join(received) == ANSWER
        assert stored(engine, user).user == (FACT["content"],)
        return
    assert "".join(received) != ANSWER
    assert "answer" not in gates.passed
    assert stored(engine, user) == Snapshot()
    model.assert_done()


@pytest.mark.parametrize("leave", [False, True], ids=["control-waits", "leaves-before-answer"])
async def test_a_plain_request_whose_client_leaves_commits_nothing(
    engine: Engine, db_url: str, leave: bool, access_statuses: Callable[[], list[int]]
) -> None:
    """A non-streamed request: the turn stages its edit and the model is held before its last
    chunk; the client gives up (its request task is cancelled, which closes the connection).
    The server notices the disconnect, cancels the turn and commits nothing, though the model
    would have completed, and logs the request as 499 (client closed request). In the control
    the client waits and gets the answer and the edit."""
    gates = Gates()
    model = held_script(gates)
    user = f"plain-leave-{uuid.uuid4().hex[:8]}"
    with server(db_url, model) as url:
        async with async_sdk(url, user) as client:
            request = asyncio.create_task(
                client.chat.completions.create(
                    model=MODEL, messages=user_says("Remember: I keep bees.")
                )
            )
            await await_for(lambda: "answer" in gates.held, "the answer held at its last chunk")
            if not leave:
                gates.release("answer")
                answer = await request
                assert answer.choices[0].message.content == ANSWER
                assert stored(engine, user).user == (FACT["content"],)
                return
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request
        await await_for(lambda: "answer" in gates.abandoned, "the server cancelling the turn")
        gates.release("answer")
        await await_for(lambda: 499 in access_statuses(), "the request logged as client-closed")
    assert "answer" not in gates.passed
    assert stored(engine, user) == Snapshot()
    model.assert_done()
