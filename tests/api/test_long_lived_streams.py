"""Every long-lived connection is counted and ends, through real uvicorn on every dialect:

- `/mcp` serves POST only: GET (the stream a stateless server cannot offer) and DELETE (no
  session to end) answer 405 with `Allow: POST` at once, with or without a token.
- Each streaming route (`/v1/chat` as SSE and as the AI SDK stream, `/openai/v1/chat/completions`
  streamed, the export download) holds one of the person's stream slots: with the limit's
  streams open, one more on any of them is 429 before it opens.
- A turn ends when its token stops being accepted (exp + AUTH_LEEWAY_SECONDS) with a final
  `token_expired` error, in each protocol; and at STREAM_MAX_SECONDS whatever its own deadline.
- An export whose client stops reading ends short (never looking whole) at STREAM_MAX_SECONDS
  or at the token's expiry, and its slot is free again; a non-streamed answer not read ends
  at the send timeout.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncGenerator, Iterator, MutableMapping
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from app.agent.events import DeltaEvent, DoneEvent, StartEvent, TurnEvent, Usage
from app.agent.openai_wire import AnswerCollector, Completion
from app.api.openai_compat import AnswerResponse
from app.api.streams import ui_stream
from app.api.streams.sse import SEND_TIMEOUT_SECONDS, SendTimeoutError
from app.conversations import repository as transcripts
from app.main import create_app
from app.operators.limits import Caller
from tests.support.apps import api_settings
from tests.support.gates import Gates
from tests.support.scripted import Hang, HeldText, ScriptedModel
from tests.support.server import live_server
from tests.support.tokens import dev_auth
from tests.support.waiting import await_for, wait_for

ANSWER = "Held before its last word."
# Requests reach the service well within this on a loaded machine; the bounds under test are
# a few seconds, so an ended stream is told from a hung one by a wide margin.
ENDS_WITHIN = 45.0

STREAMING = {
    "sse": ("/v1/chat", {}, lambda n: {"message": f"hello {n}"}),
    "ai-sdk": ("/v1/chat", {ui_stream.HEADER: "v1"}, lambda n: {"message": f"hello {n}"}),
    "openai": (
        "/openai/v1/chat/completions",
        {},
        lambda n: {
            "model": "offline-memory-1",
            "stream": True,
            "messages": [{"role": "user", "content": f"hello {n}"}],
        },
    ),
}


# -- /mcp ------------------------------------------------------------------------------------


@pytest.fixture
def plain(engine: Engine, db_url: str) -> Iterator[str]:
    with live_server(create_app(api_settings(db_url))) as url:
        yield url


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
@pytest.mark.parametrize("authorized", [True, False], ids=["token", "no-token"])
def test_mcp_serves_post_only(plain: str, method: str, authorized: bool) -> None:
    """Invariant: a stateless MCP server opens no stream: every method but POST is 405 with
    `Allow: POST`, answered whole at once (no event stream), token or not."""
    headers = {"Accept": "text/event-stream, application/json"}
    if authorized:
        headers |= dev_auth("mcp-get")
    with httpx.Client(timeout=ENDS_WITHIN) as client:
        answer = client.request(method, f"{plain}/mcp", headers=headers)
    assert answer.status_code == 405, answer.text
    assert answer.headers["allow"] == "POST"
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.json()["error"]["code"] == "method_not_allowed"


# -- counted -----------------------------------------------------------------------------------


def store_messages(engine: Engine, user: str, count: int, chars: int) -> None:
    with engine.begin() as connection:
        conversation = str(uuid.uuid4())
        transcripts.create(connection, conversation, user, "A long talk")
        for n in range(count):
            text = (f"{n:06d} " + "x" * chars)[:chars]
            transcripts.add_message(
                connection, conversation, str(uuid.uuid4()), "user", text, "complete"
            )


@pytest.mark.parametrize("route", [*STREAMING, "export"])
async def test_one_stream_past_the_limit_is_refused_on_every_streaming_route(
    engine: Engine, db_url: str, route: str
) -> None:
    """Invariant: with the person's USER_MAX_STREAMS streams open (turns held at the model),
    one more on any streaming route, the export included, is 429 `rate_limited` before it
    opens; once they end, the same request is served and frees its slot."""
    limit = 2
    gates = Gates()
    model = ScriptedModel([HeldText(ANSWER, gates, f"held{n}") for n in range(limit + 1)])
    # A check that answers (a loaded machine's second is not enough): the fallback of a slow
    # check is tests/api/test_limits_fallback.py's.
    settings = api_settings(db_url, user_max_streams=limit, limit_check_timeout_seconds=15)
    user = f"counted-{uuid.uuid4().hex[:8]}"
    app = create_app(settings, model_transport=model.transport())
    with live_server(app) as base:
        store = app.state.runtime.limits
        async with httpx.AsyncClient(base_url=base, timeout=60) as client:

            async def hold(n: int) -> int:
                async with client.stream(
                    "POST", "/v1/chat", json={"message": f"hold {n}"}, headers=dev_auth(user)
                ) as response:
                    await response.aread()
                    return response.status_code

            held = [asyncio.create_task(hold(n)) for n in range(limit)]
            await await_for(lambda: len(gates.held) == limit, "the limit's streams held")

            async def one_more() -> httpx.Response:
                if route == "export":
                    return await client.get("/v1/memory/export", headers=dev_auth(user))
                path, headers, body = STREAMING[route]
                return await client.post(path, json=body(99), headers=dev_auth(user) | headers)

            refused = await one_more()
            assert refused.status_code == 429, refused.text
            assert "rate_limited" in refused.text
            assert int(refused.headers["retry-after"]) >= 1
            for key in list(gates.held):
                gates.release(key)
            assert await asyncio.gather(*held) == [200] * limit
            await await_for(lambda: store.open_slots(Caller.user(user)) == 0, "slots freed")
            gates.release(f"held{limit}")
            served = await one_more()
            assert served.status_code == 200, served.text
            await await_for(lambda: store.open_slots(Caller.user(user)) == 0, "its slot freed")


# -- ended: turns --------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", list(STREAMING))
def test_a_turn_ends_when_its_token_expires(engine: Engine, db_url: str, protocol: str) -> None:
    """Invariant: a turn whose model never answers ends soon after the caller's token stops
    being accepted (here exp itself: no leeway), with a final `token_expired` error in its
    protocol, long before the turn's own deadline; its stream slot is freed."""
    ttl = 4
    model = ScriptedModel([Hang()])
    settings = api_settings(
        db_url, auth_leeway_seconds=0, turn_timeout_seconds=600, user_max_streams=4
    )
    user = f"expiring-{uuid.uuid4().hex[:8]}"
    app = create_app(settings, model_transport=model.transport())
    path, headers, body = STREAMING[protocol]
    with live_server(app) as base:
        began = time.time()
        with httpx.Client(base_url=base, timeout=ENDS_WITHIN + ttl) as client:
            answer = client.post(path, json=body(0), headers=dev_auth(user, ttl=ttl) | headers)
        assert answer.status_code == 200, answer.text
        assert time.time() - began < ENDS_WITHIN + ttl
        assert "token_expired" in answer.text, answer.text
        assert time.time() - began >= ttl - 1  # not before the token's end (iat is whole seconds)
        store = app.state.runtime.limits
        wait_for(lambda: store.open_slots(Caller.user(user)) == 0, "the slot freed")


def test_a_turn_ends_at_the_longest_a_stream_may_last(engine: Engine, db_url: str) -> None:
    """Invariant: STREAM_MAX_SECONDS bounds a turn whose own deadline is longer: it ends with
    the `timeout` error."""
    model = ScriptedModel([Hang()])
    settings = api_settings(db_url, turn_timeout_seconds=600, stream_max_seconds=2)
    app = create_app(settings, model_transport=model.transport())
    with live_server(app) as base, httpx.Client(base_url=base, timeout=ENDS_WITHIN) as client:
        answer = client.post("/v1/chat", json={"message": "hi"}, headers=dev_auth("longest"))
    assert answer.status_code == 200
    assert "event: error" in answer.text and '"code":"timeout"' in answer.text, answer.text


def test_the_ai_sdk_stream_gives_up_on_a_client_that_stops_reading() -> None:
    """Invariant: the AI SDK stream has the same send timeout as the other streams (it had
    none: a client that stopped reading held its connection for as long as it liked)."""

    async def nothing() -> Any:
        return
        yield

    response = ui_stream.ui_message_response(nothing(), max_seconds=5)
    assert response.send_timeout == SEND_TIMEOUT_SECONDS
    assert response.max_seconds == 5


# -- ended: the export download -----------------------------------------------------------------

# Far more than the loopback socket buffers and uvicorn's hold: a client that stops reading
# leaves the server waiting to send.
BIG_MESSAGES, BIG_CHARS = 500, 30_000


@pytest.mark.parametrize("bound", ["stream-max", "token"])
def test_an_export_not_read_ends_short_at_its_bound(
    engine: Engine, db_url: str, bound: str
) -> None:
    """Invariant: an export whose client reads its first bytes and then stops ends short (the
    connection closed, the JSON unfinished) at STREAM_MAX_SECONDS or at the token's expiry,
    and its stream slot is freed; another person is served meanwhile."""
    user = f"exporter-{uuid.uuid4().hex[:8]}"
    store_messages(engine, user, BIG_MESSAGES, BIG_CHARS)
    seconds = 4
    overrides: dict[str, Any] = {"user_max_streams": 4, "auth_leeway_seconds": 0}
    if bound == "stream-max":
        overrides["stream_max_seconds"] = seconds
    app = create_app(api_settings(db_url, **overrides))
    with live_server(app) as base:
        store = app.state.runtime.limits
        received = 0
        # Minted once the server runs: the token's seconds are the export's.
        headers = dev_auth(user, ttl=seconds) if bound == "token" else dev_auth(user)
        with (
            httpx.Client(base_url=base, timeout=ENDS_WITHIN) as client,
            client.stream("GET", "/v1/memory/export", headers=headers) as response,
        ):
            assert response.status_code == 200
            chunks = response.iter_bytes()
            received += len(next(chunks))
            assert store.open_slots(Caller.user(user)) == 1
            time.sleep(seconds + 2)  # the client stops reading past the bound
            other = httpx.get(f"{base}/v1/memory", headers=dev_auth("someone-else"), timeout=30)
            assert other.status_code == 200
            with pytest.raises(httpx.RemoteProtocolError):
                for chunk in chunks:
                    received += len(chunk)
        assert received < BIG_MESSAGES * BIG_CHARS  # never the whole document
        wait_for(lambda: store.open_slots(Caller.user(user)) == 0, "the export's slot freed")


def test_an_export_read_to_its_end_is_whole(engine: Engine, db_url: str) -> None:
    """Invariant: the bounds cut only an export past them: one read promptly is whole JSON,
    holding a slot only while it runs."""
    user = f"whole-{uuid.uuid4().hex[:8]}"
    store_messages(engine, user, 20, 1000)
    app = create_app(api_settings(db_url, user_max_streams=1, stream_max_seconds=30))
    with live_server(app) as base:
        answer = httpx.get(f"{base}/v1/memory/export", headers=dev_auth(user), timeout=60)
        assert answer.status_code == 200
        document = json.loads(answer.content)
        assert len(document["conversations"][0]["messages"]) == 20
        store = app.state.runtime.limits
        wait_for(lambda: store.open_slots(Caller.user(user)) == 0, "the slot freed")


async def test_a_plain_answer_gives_up_on_a_client_that_never_reads() -> None:
    """Invariant: the non-streamed OpenAI-compatible answer sends within the send timeout too:
    a client that never reads its body ends the response (and frees its slot) instead of
    holding it for as long as it likes."""

    async def turn() -> AsyncGenerator[TurnEvent, None]:
        yield StartEvent(conversation_id=None, turn_id="t1", memory_status="available")
        yield DeltaEvent("An answer nobody reads.")
        yield DoneEvent(finish_reason="stop", usage=Usage(1, 1))

    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client never disconnects either
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message["type"])
        if message["type"] == "http.response.body":
            await asyncio.Event().wait()  # the client's window stays full

    response = AnswerResponse(turn(), AnswerCollector(Completion("chatcmpl-t1", 0, "m")))
    response.send_timeout = 0.2
    scope = {"type": "http", "method": "POST", "path": "/openai/v1/chat/completions"}
    with pytest.raises(SendTimeoutError):
        await asyncio.wait_for(response(scope, receive, send), timeout=ENDS_WITHIN)
    assert sent == ["http.response.start", "http.response.body"]
