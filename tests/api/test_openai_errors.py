"""Refusals and failures on `/openai/v1`, as the official `openai` SDK sees them: a bad key is an
`AuthenticationError` (401, `WWW-Authenticate: Bearer`), a body this service cannot honour is a
`BadRequestError` naming the parameter, an unknown model a `NotFoundError`, a failed turn a 502
or an error inside the stream; every error body has OpenAI's shape, and none of them reaches
the model or writes memory."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import Engine

from app.main import create_app
from app.settings import Settings
from tests.support.apps import api_settings, memory_rows, oidc_settings
from tests.support.openai_sdk import MODEL, sdk, user_says
from tests.support.scripted import BrokenStream, HttpError, ScriptedModel, Text, memory_call
from tests.support.server import live_server
from tests.support.tokens import JwksServer, SigningKey, dev_token, oidc_claims

FACT = {"target": "memory", "action": "add", "content": "The deploy runs on Fridays."}
ERROR_KEYS = {"message", "type", "param", "code"}
OIDC_KEY = SigningKey.rsa("openai-rsa")


@contextmanager
def server(settings: Settings, model: ScriptedModel) -> Iterator[str]:
    with live_server(create_app(settings, model_transport=model.transport())) as url:
        yield url


def _bad_keys() -> list[Any]:
    now = int(time.time())
    return [
        pytest.param("not-a-jwt", "invalid_token", id="garbage"),
        pytest.param(
            dev_token(exp=now - 3600, iat=now - 7200, nbf=now - 7200), "token_expired", id="expired"
        ),
        pytest.param(
            dev_token(secret="another-secret-" + "x" * 40), "invalid_token", id="wrong-signature"
        ),
        pytest.param(dev_token(sub=None), "invalid_token", id="no-subject"),  # type: ignore[arg-type]
    ]


@pytest.mark.parametrize(("key", "code"), _bad_keys())
def test_a_bad_key_is_an_authentication_error_and_touches_nothing(
    db: Engine, sqlite_url: str, key: str, code: str
) -> None:
    """Listing models and completing both answer 401 with `WWW-Authenticate: Bearer` and an
    OpenAI error body; the model is never called and nothing is written."""
    model = ScriptedModel([])
    with server(api_settings(sqlite_url), model) as url, sdk(url, "nobody", api_key=key) as client:
        with pytest.raises(openai.AuthenticationError) as listed:
            client.models.list()
        with pytest.raises(openai.AuthenticationError) as completed:
            client.chat.completions.create(model=MODEL, messages=user_says("Remember this"))
    for raised in (listed.value, completed.value):
        assert raised.status_code == 401 and raised.code == code
        assert raised.response.headers["www-authenticate"] == "Bearer"
        assert set(raised.response.json()["error"]) == ERROR_KEYS
    assert model.calls == 0 and memory_rows(db) == 0


def test_an_oidc_token_is_an_api_key_too(jwks_url_settings: Settings, db: Engine) -> None:
    """With AUTH_MODE=oidc, a JWT from the identity provider is the client's API key: its `sub`
    owns the memory the turn writes."""
    model = ScriptedModel([memory_call(FACT), Text("Saved.")])
    key = OIDC_KEY.sign(oidc_claims("oidc-user"))
    with server(jwks_url_settings, model) as url, sdk(url, "", api_key=key) as client:
        answer = client.chat.completions.create(model=MODEL, messages=user_says("Remember"))
    assert answer.choices[0].message.content == "Saved."
    assert memory_rows(db, "oidc-user") == 1
    model.assert_done()


@pytest.fixture
def jwks_url_settings(sqlite_url: str) -> Iterator[Settings]:
    with JwksServer([OIDC_KEY]).running() as jwks:
        yield oidc_settings(sqlite_url, jwks.url)


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("changes", "code", "param"),
    [
        pytest.param({"tools": [TOOL]}, "tools_not_supported", "tools", id="tools"),
        pytest.param(
            {"functions": [TOOL["function"]]}, "tools_not_supported", "functions", id="functions"
        ),
        pytest.param(
            {"tool_choice": "required"}, "tools_not_supported", "tool_choice", id="tool-choice"
        ),
        pytest.param(
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": None, "tool_calls": [CALL]},
                    {"role": "tool", "tool_call_id": "c1", "content": "{}"},
                    {"role": "user", "content": "and?"},
                ]
            },
            "tools_not_supported",
            "messages[1]",
            id="tool-history",
        ),
        pytest.param(
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            _text("What is this?"),
                            {"type": "image_url", "image_url": {"url": "data:,x"}},
                        ],
                    }
                ]
            },
            "unsupported_content",
            "messages[0].content[1]",
            id="image-part",
        ),
        pytest.param({"n": 2}, "unsupported_parameter", "n", id="n-above-1"),
        pytest.param({"logprobs": True}, "unsupported_parameter", "logprobs", id="logprobs"),
        pytest.param(
            {"response_format": {"type": "json_object"}},
            "unsupported_parameter",
            "response_format",
            id="json-mode",
        ),
        pytest.param(
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "Sure"},
                ]
            },
            "invalid_request",
            "messages[1].role",
            id="assistant-last",
        ),
        pytest.param(
            {"messages": [{"role": "narrator", "content": "hi"}]},
            "invalid_request",
            "messages[0].role",
            id="unknown-role",
        ),
        pytest.param({"messages": []}, "invalid_request", "messages", id="no-messages"),
        pytest.param(
            {"messages": [{"role": "user", "content": "   "}]},
            "invalid_request",
            "messages[0].content",
            id="blank",
        ),
        pytest.param(
            {"messages": [{"role": "user", "content": "x" * 101}]},
            "message_too_long",
            "messages[0].content",
            id="too-long",
        ),
        pytest.param({"temperature": 3}, "invalid_request", "temperature", id="temperature"),
        pytest.param({"max_tokens": 0}, "invalid_request", "max_tokens", id="max-tokens"),
        pytest.param({"stream": "yes"}, "invalid_request", "stream", id="stream-not-bool"),
        pytest.param(
            {"stop": ["a", "b", "c", "d", "e"]}, "invalid_request", "stop", id="five-stops"
        ),
    ],
)
def test_what_cannot_be_honoured_is_a_bad_request_before_anything_runs(
    db: Engine, sqlite_url: str, changes: dict[str, Any], code: str, param: str
) -> None:
    """Each refusal is a 400 `BadRequestError` with a stable code and the offending parameter;
    the model is never called and nothing is written."""
    model = ScriptedModel([])
    body: dict[str, Any] = {"model": MODEL, "messages": user_says("Remember that I fly.")}
    extra = {key: value for key, value in changes.items() if key != "messages"}
    settings = api_settings(sqlite_url, max_message_chars=100)
    with (
        server(settings, model) as url,
        sdk(url, "refused") as client,
        pytest.raises(openai.BadRequestError) as raised,
    ):
        client.chat.completions.create(
            model=body["model"],
            messages=changes.get("messages", body["messages"]),
            extra_body=extra,
        )
    assert (raised.value.code, raised.value.param) == (code, param)
    assert set(raised.value.response.json()["error"]) == ERROR_KEYS
    assert raised.value.type == "invalid_request_error"
    assert model.calls == 0 and memory_rows(db) == 0


def test_an_unknown_model_is_not_found(db: Engine, sqlite_url: str) -> None:
    """Only the listed id is served: another name is a `NotFoundError` (`model_not_found`) for
    completions and for retrieving the model; the listed one can be retrieved."""
    model = ScriptedModel([])
    with server(api_settings(sqlite_url), model) as url, sdk(url, "models") as client:
        assert client.models.retrieve(MODEL).id == MODEL
        with pytest.raises(openai.NotFoundError) as completed:
            client.chat.completions.create(model="gpt-4o", messages=user_says("hi"))
        with pytest.raises(openai.NotFoundError) as retrieved:
            client.models.retrieve("gpt-4o")
    for raised in (completed.value, retrieved.value):
        assert (raised.code, raised.param) == ("model_not_found", "model")
    assert model.calls == 0


def test_a_body_above_the_size_limit_is_a_413_in_the_same_shape(sqlite_url: str) -> None:
    """Whether the size is declared up front (refused before routing) or only found while the
    body streams in, the 413 has OpenAI's error body; the model is never called."""
    model = ScriptedModel([])
    big = "x" * 2048

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit trips while reading
        yield b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", "content": "'
        yield big.encode()
        yield b'"}]}'

    settings = api_settings(sqlite_url, max_request_bytes=1024)
    with server(settings, model) as url, sdk(url, "big") as client:
        with pytest.raises(openai.APIStatusError) as declared:
            client.chat.completions.create(model=MODEL, messages=user_says(big))
        streamed = httpx.post(
            f"{url}/openai/v1/chat/completions",
            content=chunks(),
            headers={"Authorization": f"Bearer {dev_token('big')}"},
        )
    assert declared.value.status_code == 413 and declared.value.code == "payload_too_large"
    assert set(declared.value.response.json()["error"]) == ERROR_KEYS
    assert (streamed.status_code, streamed.json()["error"]["code"]) == (413, "payload_too_large")
    assert set(streamed.json()["error"]) == ERROR_KEYS
    assert model.calls == 0


def test_what_the_sdk_cannot_send_is_refused_in_the_same_shape(sqlite_url: str) -> None:
    """Bodies and paths no SDK produces (not JSON, an unknown URL, a wrong method) get the same
    OpenAI error body, with 400, 404 and 405."""
    model = ScriptedModel([])
    headers = {"Authorization": f"Bearer {dev_token('raw')}"}
    with server(api_settings(sqlite_url), model) as url, httpx.Client(base_url=url) as client:
        not_json = client.post(
            "/openai/v1/chat/completions",
            content=b"{nope",
            headers={**headers, "content-type": "application/json"},
        )
        unknown = client.post("/openai/v1/embeddings", json={}, headers=headers)
        odd_id = client.get("/openai/v1/models/a%0Ab", headers=headers)  # no route matches
        wrong_method = client.get("/openai/v1/chat/completions", headers=headers)
    assert (not_json.status_code, not_json.json()["error"]["code"]) == (400, "invalid_json")
    for response in (unknown, odd_id):
        assert (response.status_code, response.json()["error"]["code"]) == (404, "unknown_url")
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    for response in (not_json, unknown, odd_id, wrong_method):
        assert set(response.json()["error"]) == ERROR_KEYS
    assert model.calls == 0


def test_a_failed_turn_is_a_502_or_an_error_in_the_stream_and_commits_nothing(
    db: Engine, sqlite_url: str
) -> None:
    """The model stages an edit, then fails. Without streaming the answer is a 502 OpenAI error
    (`model_error`); while streaming, the text already sent is followed by an error object,
    which the SDK raises as an `APIError`. Neither turn commits its edit."""
    model = ScriptedModel(
        [
            memory_call(FACT),
            HttpError(500, "upstream down"),
            memory_call(FACT),
            BrokenStream("Half an ans"),
        ]
    )
    received: list[str] = []
    with server(api_settings(sqlite_url), model) as url, sdk(url, "failing") as client:
        with pytest.raises(openai.InternalServerError) as plain:
            client.chat.completions.create(model=MODEL, messages=user_says("Remember"))
        stream = client.chat.completions.create(
            model=MODEL, messages=user_says("Remember"), stream=True
        )
        with pytest.raises(openai.APIError) as streamed:
            for chunk in stream:
                received.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
    assert plain.value.status_code == 502 and plain.value.code == "model_error"
    assert set(plain.value.response.json()["error"]) == ERROR_KEYS
    assert "".join(received) == "Half an ans"
    assert streamed.value.code == "model_stream_broken"
    assert "Nothing was saved to memory" in streamed.value.message
    assert memory_rows(db) == 0
    model.assert_done()
