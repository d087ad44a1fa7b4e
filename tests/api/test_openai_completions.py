"""`/openai/v1` through the official `openai` SDK against a live server, on every dialect: plain
and streamed answers in the SDK's own types, the same turn as `/v1/chat` (memory written by the
model committed after the answer and never shown to the client, the compiled system prompt
before the client's own), usage passed through, and nothing stored as a conversation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from openai.types.chat import ChatCompletionChunk
from sqlalchemy import Engine, func, insert, select

from app.db.schema import agent_memory, conversations
from app.db.writers import maintenance
from app.main import create_app
from app.memory.rules import Operation
from app.memory.service import MemoryService
from tests.support.apps import api_settings, memory_rows
from tests.support.databases import stored
from tests.support.openai_sdk import MODEL, data_lines, prompt_words, sdk, user_says
from tests.support.scripted import ScriptedModel, Text, ToolCall, ToolCalls, memory_call
from tests.support.server import live_server

FACT = {"target": "user", "action": "add", "content": "The user drinks rooibos tea at 4pm."}
ANSWER = "Noted, I will keep that in mind."


@contextmanager
def server(db_url: str, model: ScriptedModel, **overrides: Any) -> Iterator[str]:
    app = create_app(api_settings(db_url, **overrides), model_transport=model.transport())
    with live_server(app) as url:
        yield url


def conversation_rows(engine: Engine, user: str) -> int:
    query = select(func.count()).select_from(conversations).where(conversations.c.user_id == user)
    with engine.connect() as connection:
        return int(connection.execute(query).scalar_one())


def test_plain_and_streamed_answers_arrive_in_the_sdks_types(engine: Engine, db_url: str) -> None:
    """The models list names the configured model; a plain answer is one `chat.completion` with
    the model's usage; a stream is a role chunk, the text pieces, a finishing chunk, a usage chunk
    when asked for, and `[DONE]`; and none of it is stored as a conversation."""
    model = ScriptedModel([Text(ANSWER), Text(ANSWER), Text(ANSWER)])
    with server(db_url, model) as url, sdk(url, "plain-user") as client:
        assert [card.id for card in client.models.list()] == [MODEL]

        plain = client.chat.completions.create(model=MODEL, messages=user_says("Hello there"))
        assert plain.object == "chat.completion" and plain.id.startswith("chatcmpl-")
        assert plain.model == MODEL
        [choice] = plain.choices
        assert choice.message.content == ANSWER and choice.message.role == "assistant"
        assert choice.message.tool_calls is None and choice.finish_reason == "stop"
        assert plain.usage is not None
        assert plain.usage.prompt_tokens == prompt_words(model.requests[0])
        assert plain.usage.completion_tokens == len(ANSWER.split())
        assert plain.usage.total_tokens == plain.usage.prompt_tokens + len(ANSWER.split())

        chunks = list(
            client.chat.completions.create(
                model=MODEL,
                messages=user_says("Hello again"),
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        assert len({chunk.id for chunk in chunks}) == 1
        assert chunks[0].choices[0].delta.role == "assistant"
        pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
        assert "".join(pieces) == ANSWER and len(pieces) > 2  # streamed piece by piece
        finishing, usage = chunks[-2], chunks[-1]
        assert finishing.choices[0].finish_reason == "stop"
        assert usage.choices == [] and usage.usage is not None
        assert usage.usage.prompt_tokens == prompt_words(model.requests[1])
        assert all(chunk.usage is None for chunk in chunks[:-1])

        with client.chat.completions.with_streaming_response.create(
            model=MODEL, messages=user_says("And once more"), stream=True
        ) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            payloads = data_lines(response.iter_lines())
    assert payloads[-1] == "[DONE]"
    raw_chunks = [ChatCompletionChunk.model_validate_json(line) for line in payloads[:-1]]
    assert raw_chunks[-1].choices[0].finish_reason == "stop"  # no usage chunk unless asked
    assert conversation_rows(engine, "plain-user") == 0
    model.assert_done()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_memory_write_is_committed_and_never_shown_to_the_client(
    engine: Engine, db_url: str, stream: bool
) -> None:
    """The model calls memory_update, then answers. The tool runs server-side (its result goes
    back to the model), the edit is committed after the answer, and the client receives only the
    answer: no tool call, no tool name, no memory content, in the raw bytes or the parsed
    objects. Usage is the sum of both model rounds."""
    call = memory_call(FACT)
    model = ScriptedModel([call, Text(ANSWER)])
    user = f"writer-{stream}"
    with server(db_url, model) as url, sdk(url, user) as client:
        request: dict[str, Any] = {"model": MODEL, "messages": user_says("Remember my tea.")}
        if stream:
            with client.chat.completions.with_streaming_response.create(
                **request, stream=True, stream_options={"include_usage": True}
            ) as response:
                raw = "\n".join(response.iter_lines())
            payloads = data_lines(raw.splitlines())
            assert payloads[-1] == "[DONE]"
            chunks = [ChatCompletionChunk.model_validate_json(line) for line in payloads[:-1]]
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert all(not c.choices or c.choices[0].delta.tool_calls is None for c in chunks)
            usage = chunks[-1].usage
        else:
            answer = client.chat.completions.with_raw_response.create(**request)
            raw = answer.text
            completion = answer.parse()
            text = completion.choices[0].message.content or ""
            assert completion.choices[0].message.tool_calls is None
            usage = completion.usage
    assert text == ANSWER
    for hidden in (FACT["content"], "memory_update", "tool_calls", "operations"):
        assert hidden not in raw
    assert stored(engine, user).user == (FACT["content"],)
    assert model.requests[1].messages[-1]["role"] == "tool"  # the tool ran in the server
    arguments = call.calls[0].arguments_json()
    assert usage is not None
    assert usage.prompt_tokens == sum(prompt_words(r) for r in model.requests)
    assert usage.completion_tokens == len(arguments.split()) + len(ANSWER.split())
    assert conversation_rows(engine, user) == 0
    model.assert_done()


def test_the_compiled_system_prompt_comes_first_and_the_clients_own_after_it(
    engine: Engine, db_url: str
) -> None:
    """The model receives the service's system prompt (with the user's memory block) first;
    the client's system and developer messages follow as `system` messages, in the places the
    client put them, with text parts joined; the client's messages are the whole history."""
    MemoryService(engine).commit_operations(
        "prompted", [[Operation("user", "add", content="The user writes in Portuguese.")]]
    )
    model = ScriptedModel([Text(ANSWER)])
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Client rule: answer like a pirate."},
        {"role": "user", "content": "First question"},
        {"role": "assistant", "content": [{"type": "text", "text": "First answer"}]},
        {
            "role": "developer",
            "content": [
                {"type": "text", "text": "Dev note one"},
                {"type": "text", "text": "Dev note two"},
            ],
        },
        {"role": "assistant", "content": ""},  # empty: says nothing, not sent
        {"role": "user", "content": [{"type": "text", "text": "Second question"}]},
    ]
    with server(db_url, model) as url, sdk(url, "prompted") as client:
        client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
    sent = [dict(message) for message in model.requests[0].messages]
    compiled = sent[0]
    assert compiled["role"] == "system"
    assert "Persistent memory" in compiled["content"]
    assert "The user writes in Portuguese." in compiled["content"]
    assert "pirate" not in compiled["content"]
    assert sent[1:] == [
        {"role": "system", "content": "Client rule: answer like a pirate."},
        {"role": "user", "content": "First question"},
        {"role": "assistant", "content": "First answer"},
        {"role": "system", "content": "Dev note one\nDev note two"},
        {"role": "user", "content": "Second question"},
    ]
    # The same turn as /v1/chat: memory and conversation search, both run server-side.
    assert [tool["function"]["name"] for tool in model.requests[0].tools] == [
        "memory_update",
        "conversation_search",
    ]
    model.assert_done()


def test_an_unreadable_memory_still_answers_and_writes_nothing(engine: Engine, db_url: str) -> None:
    """Memory read fail-open on this route too: an unreadable row leaves the prompt without a
    memory block, the tool answers that nothing can be saved, the client still gets its answer,
    and the row is untouched."""
    with engine.begin() as connection, maintenance(connection):
        connection.execute(
            insert(agent_memory).values(
                user_id="unreadable",
                memory_type="memory",
                content="future format sentinel-v2",
                schema_version=2,
            )
        )
    model = ScriptedModel([memory_call(FACT), Text("Memory is unavailable.")])
    with server(db_url, model) as url, sdk(url, "unreadable") as client:
        answer = client.chat.completions.create(model=MODEL, messages=user_says("Remember my tea."))
    assert answer.choices[0].message.content == "Memory is unavailable."
    assert "sentinel-v2" not in model.requests[0].system_text()
    assert "nothing was saved" in str(model.requests[1].messages[-1]["content"])
    assert memory_rows(engine) == 1
    model.assert_done()


def test_finish_reasons_map_to_openai_ones(db: Engine, sqlite_url: str) -> None:
    """`length` stays `length`; a turn stopped at the tool-round limit reports `length` (cut
    short by a limit, no tool calls for the client to run) and commits nothing it staged."""
    model = ScriptedModel([Text("Cut sh", finish_reason="length"), memory_call(FACT)])
    with server(sqlite_url, model, llm_max_rounds=1) as url, sdk(url, "limits") as client:
        cut = client.chat.completions.create(model=MODEL, messages=user_says("Tell me more"))
        limited = client.chat.completions.create(model=MODEL, messages=user_says("Remember"))
    assert (cut.choices[0].finish_reason, cut.choices[0].message.content) == ("length", "Cut sh")
    assert limited.choices[0].finish_reason == "length"
    assert limited.choices[0].message.tool_calls is None
    assert memory_rows(db, "limits") == 0
    model.assert_done()


def test_generation_options_reach_the_model_within_the_servers_cap(
    db: Engine, sqlite_url: str
) -> None:
    """temperature, top_p, penalties, seed and stop pass through to the model as given;
    max_tokens / max_completion_tokens pass through but never above LLM_MAX_TOKENS; a request
    without options sends only the server's cap."""
    model = ScriptedModel([Text(ANSWER), Text(ANSWER), Text(ANSWER)])
    with server(sqlite_url, model, llm_max_tokens=64) as url, sdk(url, "options") as client:
        client.chat.completions.create(
            model=MODEL,
            messages=user_says("one"),
            temperature=0.25,
            top_p=0.5,
            max_tokens=500,
            presence_penalty=0.5,
            frequency_penalty=-0.5,
            seed=7,
            stop=["END"],
        )
        client.chat.completions.create(
            model=MODEL, messages=user_says("two"), max_completion_tokens=12
        )
        client.chat.completions.create(model=MODEL, messages=user_says("three"))
    assert [dict(request.sampling) for request in model.requests] == [
        {
            "max_tokens": 64,
            "temperature": 0.25,
            "top_p": 0.5,
            "presence_penalty": 0.5,
            "frequency_penalty": -0.5,
            "seed": 7,
            "stop": ["END"],
        },
        {"max_tokens": 12},
        {"max_tokens": 64},
    ]
    model.assert_done()


def test_tool_calls_of_the_model_are_never_forwarded(db: Engine, sqlite_url: str) -> None:
    """A call to a tool the service does not offer is answered server-side like any unknown
    tool; the client sees only the final answer."""
    model = ScriptedModel(
        [
            ToolCalls((ToolCall("get_weather", {"city": "Lisbon"}, "call_w"),)),
            Text(ANSWER),
        ]
    )
    with server(sqlite_url, model) as url, sdk(url, "unknown-tool") as client:
        answer = client.chat.completions.create(model=MODEL, messages=user_says("Weather?"))
    assert answer.choices[0].message.content == ANSWER
    assert answer.choices[0].message.tool_calls is None
    assert model.requests[1].messages[-1]["role"] == "tool"
    model.assert_done()
