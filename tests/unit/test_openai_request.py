"""The chat-completions request parser (pure): the client's messages become the turn's history
and message, its options the sampling; everything this service cannot honour is refused with a
stable code and the parameter's path, never silently dropped or half-applied."""

from __future__ import annotations

from typing import Any

import pytest

from app.agent.llm import Sampling
from app.agent.request import HistoryMessage
from app.api.openai_request import WireError, parse_completion_request

MODEL = "m-1"


def parse(body: object, *, max_message_chars: int = 100) -> Any:
    return parse_completion_request(body, model_id=MODEL, max_message_chars=max_message_chars)


def body(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    listed = list(messages) or [{"role": "user", "content": "Hello"}]
    return {"model": MODEL, "messages": listed, **fields}


def test_the_clients_messages_become_history_and_the_last_user_message() -> None:
    """Order kept; developer is sent as system; text parts joined by newlines; an assistant's
    refusal part counts as its text; empty messages and a null assistant content say nothing;
    unknown top-level fields are ignored."""
    request = parse(
        body(
            {"role": "developer", "content": "Be brief."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]},
            {"role": "assistant", "content": None},
            {"role": "system", "content": "  "},
            {"role": "user", "content": "Last one", "name": "ana"},
            user="end-user-7",
            metadata={"k": "v"},
            store=True,
            parallel_tool_calls=False,
        )
    )
    assert request.history == (
        HistoryMessage("system", "Be brief."),
        HistoryMessage("user", "a\nb"),
        HistoryMessage("assistant", "I can't."),
    )
    assert request.message == "Last one"
    assert (request.model, request.stream, request.include_usage) == (MODEL, False, False)
    assert request.sampling == Sampling()


def test_options_become_the_turns_sampling() -> None:
    request = parse(
        body(
            stream=True,
            stream_options={"include_usage": True},
            temperature=0,
            top_p=1,
            max_tokens=300,
            max_completion_tokens=200,
            presence_penalty=-2,
            frequency_penalty=2,
            seed=-5,
            stop="STOP",
            n=1,
            logprobs=False,
            response_format={"type": "text"},
            modalities=["text"],
            tools=[],
            tool_choice="none",
        )
    )
    assert (request.stream, request.include_usage) == (True, True)
    assert request.sampling == Sampling(
        max_tokens=200,
        temperature=0.0,
        top_p=1.0,
        presence_penalty=-2.0,
        frequency_penalty=2.0,
        seed=-5,
        stop=("STOP",),
    )


def test_the_servers_token_cap_wins_over_the_clients() -> None:
    assert Sampling(max_tokens=500).options(max_tokens_cap=64) == {"max_tokens": 64}
    assert Sampling(max_tokens=10).options(max_tokens_cap=64) == {"max_tokens": 10}
    assert Sampling().options(max_tokens_cap=None) == {}


USER = {"role": "user", "content": "hi"}


@pytest.mark.parametrize(
    ("payload", "status", "code", "param"),
    [
        pytest.param([USER], 400, "invalid_request", None, id="not-an-object"),
        pytest.param({"messages": [USER]}, 400, "invalid_request", "model", id="no-model"),
        pytest.param(body(model=7), 400, "invalid_request", "model", id="model-not-text"),
        pytest.param(body(model="other"), 404, "model_not_found", "model", id="unknown-model"),
        pytest.param(body(messages="hi"), 400, "invalid_request", "messages", id="messages-text"),
        pytest.param(
            body("hi"),
            400,
            "invalid_request",
            "messages[0]",  # type: ignore[arg-type]
            id="message-not-object",
        ),
        pytest.param(
            body({"role": "user"}), 400, "invalid_request", "messages[0].content", id="no-content"
        ),
        pytest.param(
            body({"role": "user", "content": 5}),
            400,
            "invalid_request",
            "messages[0].content",
            id="content-number",
        ),
        pytest.param(
            body({"role": "user", "content": ["hi"]}),
            400,
            "invalid_request",
            "messages[0].content[0]",
            id="part-not-object",
        ),
        pytest.param(
            body({"role": "user", "content": [{"type": "text"}]}),
            400,
            "invalid_request",
            "messages[0].content[0]",
            id="text-part-without-text",
        ),
        pytest.param(
            body({"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}),
            400,
            "invalid_request",
            "messages[0].content[0]",
            id="user-refusal",
        ),
        pytest.param(
            body({"role": "user", "content": [{"type": "input_audio"}]}),
            400,
            "unsupported_content",
            "messages[0].content[0]",
            id="audio-part",
        ),
        pytest.param(
            body({"role": "user", "content": [{"type": "file"}]}),
            400,
            "unsupported_content",
            "messages[0].content[0]",
            id="file-part",
        ),
        pytest.param(
            body({"role": "system", "content": "s"}, {"role": "user", "content": "\ud800"}),
            400,
            "invalid_request",
            "messages[1].content",
            id="unpaired-surrogate",
        ),
        pytest.param(
            body({"role": "function", "name": "f", "content": "{}"}, USER),
            400,
            "tools_not_supported",
            "messages[0]",
            id="function-message",
        ),
        pytest.param(
            body(tool_choice={"type": "function", "function": {"name": "f"}}),
            400,
            "tools_not_supported",
            "tool_choice",
            id="forced-tool",
        ),
        pytest.param(
            body(function_call={"name": "f"}),
            400,
            "tools_not_supported",
            "function_call",
            id="function-call",
        ),
        pytest.param(
            body(temperature=True), 400, "invalid_request", "temperature", id="temperature-bool"
        ),
        pytest.param(body(top_p=1.5), 400, "invalid_request", "top_p", id="top-p"),
        pytest.param(
            body(presence_penalty=-3),
            400,
            "invalid_request",
            "presence_penalty",
            id="presence-penalty",
        ),
        pytest.param(body(seed=1.5), 400, "invalid_request", "seed", id="seed-float"),
        pytest.param(
            body(max_completion_tokens="9"),
            400,
            "invalid_request",
            "max_completion_tokens",
            id="max-completion-text",
        ),
        pytest.param(body(stop=""), 400, "invalid_request", "stop", id="empty-stop"),
        pytest.param(body(stop=[1]), 400, "invalid_request", "stop", id="stop-number"),
        pytest.param(
            body(stream_options=True), 400, "invalid_request", "stream_options", id="stream-options"
        ),
        pytest.param(
            body(stream_options={"include_usage": "yes"}),
            400,
            "invalid_request",
            "stream_options.include_usage",
            id="include-usage",
        ),
        pytest.param(body(n=0), 400, "invalid_request", "n", id="n-zero"),
        pytest.param(body(n="2"), 400, "invalid_request", "n", id="n-text"),
        pytest.param(
            body(modalities=["text", "audio"]),
            400,
            "unsupported_parameter",
            "modalities",
            id="audio-out",
        ),
        pytest.param(
            body(audio={"voice": "alloy"}),
            400,
            "unsupported_parameter",
            "modalities",
            id="audio-options",
        ),
        pytest.param(
            body({"role": "user", "content": "x" * 101}),
            400,
            "message_too_long",
            "messages[0].content",
            id="too-long",
        ),
    ],
)
def test_what_cannot_be_honoured_is_refused_with_its_parameter(
    payload: object, status: int, code: str, param: str | None
) -> None:
    with pytest.raises(WireError) as raised:
        parse(payload)
    assert (raised.value.status, raised.value.code, raised.value.param) == (status, code, param)
    assert raised.value.message


def test_the_length_limit_is_on_the_turns_message_only() -> None:
    """Earlier messages are the client's context: only the message answered now is bounded by
    MAX_MESSAGE_CHARS (the request body size bounds the rest)."""
    long = "y" * 500
    request = parse(body({"role": "assistant", "content": long}, {"role": "user", "content": "ok"}))
    assert request.history == (HistoryMessage("assistant", long),)
