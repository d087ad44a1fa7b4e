"""Only `stop` (and `length`, the documented cut answer) ends a turn as an answer: a round that
ends with any other finish reason (`error`, `content_filter`, one we do not know) is a failed
round, on `/v1/chat` and `/openai/v1` alike, through real uvicorn on every dialect: nothing is
committed, the client gets an `error`, and the fallback runs only as it does for a model
error (nothing staged, nothing shown). A malformed stream is a broken one, under the same rule."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from sqlalchemy import Engine

from tests.support.apps import api_settings, memory_rows
from tests.support.openai_sdk import MODEL, sdk, user_says
from tests.support.scripted import (
    ScriptedModel,
    Text,
    memory_call,
    routed_transport,
    serve_with_model,
)
from tests.support.sse import first, names, post_chat, text_of
from tests.support.tokens import dev_auth

FACT = {"target": "user", "action": "add", "content": "The user keeps bees."}
FAILED_REASONS = [
    pytest.param("error", id="error"),
    pytest.param("content_filter", id="content_filter"),
    pytest.param("function_call", id="legacy-function_call"),
    pytest.param("something_new", id="unknown"),
    pytest.param("Stop!\u202e<script>", id="not-a-word"),
]


@pytest.mark.parametrize("reason", FAILED_REASONS)
def test_a_round_that_ends_with_another_reason_fails_and_commits_nothing(
    engine: Engine, db_url: str, reason: str
) -> None:
    """Staged, then the round ends with `reason`: an `error` event (model_error) is the last
    event, no `memory` event says committed, no `done`, and memory is empty. The reason is
    named only when it is one plain word."""
    model = ScriptedModel([memory_call(FACT), Text("Half an answer", finish_reason=reason)])
    with serve_with_model(api_settings(db_url), model) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "remember the bees"})
    assert names(events)[-1] == "error" and "done" not in names(events)
    assert "memory" not in names(events)
    error = first(events, "error").data
    assert error["code"] == "model_error"
    assert "Nothing was saved" in error["message"]
    assert ("<script>" in error["message"]) is False
    assert memory_rows(engine) == 0
    model.assert_done()


def test_stop_and_length_still_answer(engine: Engine, db_url: str) -> None:
    """The bound of the rule: `stop` and `length` still end the turn with `done` and commit."""
    model = ScriptedModel(
        [memory_call(FACT), Text("Noted."), Text("Cut sh", finish_reason="length")]
    )
    with serve_with_model(api_settings(db_url), model) as url:
        _, stopped = post_chat(url, dev_auth("alice"), {"message": "remember the bees"})
        _, cut = post_chat(url, dev_auth("alice"), {"message": "tell me more"})
    assert first(stopped, "memory").data["outcome"] == "committed"
    assert stopped[-1].data == {"finish_reason": "stop"}
    assert cut[-1].data == {"finish_reason": "length"}
    assert memory_rows(engine) == 1
    model.assert_done()


def test_with_nothing_staged_or_shown_the_fallback_answers(engine: Engine, db_url: str) -> None:
    """The primary's first round ends with `content_filter` before any text: the fallback model
    answers the turn, exactly as after a model error."""
    primary = ScriptedModel([Text("", finish_reason="content_filter")], name="primary")
    fallback = ScriptedModel([Text("Answered by the fallback.")], name="fallback")
    settings = api_settings(db_url, llm_model="primary", llm_fallback_model="fallback")
    transport = routed_transport({"primary": primary, "fallback": fallback})
    with serve_with_model(settings, transport=transport) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "hello"})
    assert text_of(events) == "Answered by the fallback."
    assert events[-1].data == {"finish_reason": "stop"}
    primary.assert_done()
    fallback.assert_done()


def test_after_staging_the_fallback_never_runs(engine: Engine, db_url: str) -> None:
    """Staged, then `error` as the finish reason: the turn fails; the fallback is not called."""
    primary = ScriptedModel([memory_call(FACT), Text("", finish_reason="error")], name="primary")
    fallback = ScriptedModel([], name="fallback")
    settings = api_settings(db_url, llm_model="primary", llm_fallback_model="fallback")
    transport = routed_transport({"primary": primary, "fallback": fallback})
    with serve_with_model(settings, transport=transport) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "remember the bees"})
    assert first(events, "error").data["code"] == "model_error"
    assert memory_rows(engine) == 0
    primary.assert_done()
    fallback.assert_done()


def test_the_openai_route_fails_the_same_way(engine: Engine, db_url: str) -> None:
    """On `/openai/v1`: a plain request is a 502 `model_error`, a streamed one ends with an
    error object (the SDK raises it) after the text already sent, never `finish_reason: stop`;
    neither commits its staged edit."""
    model = ScriptedModel(
        [
            memory_call(FACT),
            Text("Filtered", finish_reason="content_filter"),
            memory_call(FACT),
            Text("Half", finish_reason="error"),
        ]
    )
    finishes: list[str | None] = []
    with serve_with_model(api_settings(db_url), model) as url, sdk(url, "alice") as client:
        with pytest.raises(openai.APIStatusError) as plain:
            client.chat.completions.create(model=MODEL, messages=user_says("remember"))
        stream = client.chat.completions.create(
            model=MODEL, messages=user_says("remember"), stream=True
        )
        with pytest.raises(openai.APIError) as streamed:
            for chunk in stream:
                finishes.extend(choice.finish_reason for choice in chunk.choices)
    assert plain.value.status_code == 502 and plain.value.code == "model_error"
    assert streamed.value.code == "model_error"
    assert "stop" not in finishes
    assert memory_rows(engine) == 0
    model.assert_done()


class MalformedPrimary(httpx.AsyncBaseTransport):
    """The primary model answers 200 with `body` (a stream no model should send); any other
    model is served by `fallback`."""

    def __init__(self, body: bytes, fallback: httpx.AsyncBaseTransport) -> None:
        self.body = body
        self.fallback = fallback
        self.primary_calls = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if json.loads(await request.aread()).get("model") == "primary":
            self.primary_calls += 1
            headers = {"content-type": "text/event-stream"}
            return httpx.Response(200, headers=headers, content=self.body)
        return await self.fallback.handle_async_request(request)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"data: not json\n\n", id="non-json-data-line"),
        pytest.param(b'data: {"choices": "x"}\n\n', id="chunk-of-the-wrong-shape"),
    ],
)
def test_a_malformed_stream_is_broken_and_the_fallback_answers(db_url: str, body: bytes) -> None:
    """Invariant: a harmless but malformed stream is `model_stream_broken` (never an internal
    error), so with nothing staged or shown the fallback model answers the turn."""
    fallback = ScriptedModel([Text("Answered by the fallback.")], name="fallback")
    transport = MalformedPrimary(body, fallback.transport())
    settings = api_settings(db_url, llm_model="primary", llm_fallback_model="fallback")
    with serve_with_model(settings, transport=transport) as url:  # type: ignore[arg-type]
        _, events = post_chat(url, dev_auth("alice"), {"message": "hello"})
    assert transport.primary_calls == 1
    assert text_of(events) == "Answered by the fallback."
    assert events[-1].data == {"finish_reason": "stop"}
    fallback.assert_done()
