"""The offline model: deterministic replies, and a real OpenAI wire format through AsyncOpenAI."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from app.agent.tools import MEMORY_TOOL
from app.memory.render import BlockTags, render_block
from app.memory.rules import Snapshot
from app.offline.model import LONG_ANSWER, OFFLINE_NOTICE, OfflineModel, memory_entries
from app.offline.transport import ChatCompletionsTransport
from app.offline.wire import ChatRequest, Text, ToolCall, ToolCalls

TAGS = BlockTags("fe" * 16)
SNAPSHOT = Snapshot(
    user=("The user prefers short answers.", "The user's name is Ada."),
    memory=("The project uses PostgreSQL 16.",),
)


def request(
    text: str,
    *,
    tools: bool = True,
    snapshot: Snapshot | None = SNAPSHOT,
    extra: list[dict[str, Any]] | None = None,
) -> ChatRequest:
    system = "You are helpful.\n\n" + (render_block(snapshot, TAGS) if snapshot is not None else "")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": text},
        *(extra or []),
    ]
    return ChatRequest(
        "offline-memory-1",
        tuple(messages),
        (MEMORY_TOOL,) if tools else (),
        stream=True,
        include_usage=True,
    )


def operations(reply: object) -> list[dict[str, Any]]:
    assert isinstance(reply, ToolCalls)
    (call,) = reply.calls
    assert call.name == "memory_update"
    return list(json.loads(call.arguments_json())["operations"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "Remember that I prefer tea over coffee",
            {"target": "user", "action": "add", "content": "The user prefers tea over coffee."},
            id="remember-I",
        ),
        pytest.param(
            "I prefer short code examples.",
            {"target": "user", "action": "add", "content": "The user prefers short code examples."},
            id="I-prefer",
        ),
        pytest.param(
            "My name is Grace Hopper",
            {"target": "user", "action": "add", "content": "The user's name is Grace Hopper."},
            id="my-name",
        ),
        pytest.param(
            "remember that the staging database runs on port 5433",
            {
                "target": "memory",
                "action": "add",
                "content": "The staging database runs on port 5433.",
            },
            id="remember-fact",
        ),
        pytest.param(
            "Forget that I prefer short answers",
            {"target": "user", "action": "remove", "match": "The user prefers short answers."},
            id="forget-user",
        ),
        pytest.param(
            "forget postgresql",
            {"target": "memory", "action": "remove", "match": "The project uses PostgreSQL 16."},
            id="forget-memory",
        ),
    ],
)
def test_memory_requests_become_one_tool_call(text: str, expected: dict[str, Any]) -> None:
    """Save and forget requests become one memory_update call with the design's operation."""
    assert operations(OfflineModel().reply(request(text))) == [expected]


def test_forget_without_a_matching_entry_says_so() -> None:
    """A forget request that matches nothing in the prompt's block calls no tool."""
    reply = OfflineModel().reply(request("forget my favourite colour"))
    assert isinstance(reply, Text) and "nothing" in reply.text


def test_recall_reads_the_block_in_its_prompt() -> None:
    """'What do you remember' answers from the memory block it was given, nothing else."""
    reply = OfflineModel().reply(request("What do you remember about me?"))
    assert isinstance(reply, Text)
    for entry in (*SNAPSHOT.user, *SNAPSHOT.memory):
        assert entry in reply.text
    empty = OfflineModel().reply(request("what do you remember?", snapshot=None))
    assert isinstance(empty, Text) and "anything" in empty.text


@pytest.mark.parametrize(
    "text", ["remember that I like tea", "forget short answers", "my name is Ada"]
)
def test_never_calls_a_tool_that_is_not_offered(text: str) -> None:
    """With no tools in the request, the model answers in text only."""
    assert isinstance(OfflineModel().reply(request(text, tools=False)), Text)


def test_other_messages_explain_the_offline_model_and_long_ones_are_long() -> None:
    """Anything else gets the configuration hint; 'long'/'story' get a long answer."""
    plain = OfflineModel().reply(request("hello there"))
    assert plain == Text(OFFLINE_NOTICE)
    assert all(name in OFFLINE_NOTICE for name in ("LLM_BASE_URL", "LLM_API_KEY", "LLM_MODEL"))
    story = OfflineModel().reply(request("tell me a story"))
    assert story == Text(LONG_ANSWER) and len(LONG_ANSWER.split()) > 200


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"status": "staged", "operations": 1}, "Saved."),
        (
            {"status": "rejected", "reason": "The entry is empty."},
            "I could not save that: The entry is empty.",
        ),
        (
            {"status": "unavailable", "message": "memory unavailable: nothing was saved"},
            "Memory is unavailable, nothing was saved.",
        ),
    ],
)
def test_reads_the_tool_result(result: dict[str, Any], expected: str) -> None:
    """After a tool call, the reply follows the tool result message."""
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {
                    "name": "memory_update",
                    "arguments": json.dumps(
                        {"operations": [{"target": "user", "action": "add", "content": "x"}]}
                    ),
                },
            }
        ],
    }
    tool = {"role": "tool", "tool_call_id": "c1", "content": json.dumps(result)}
    assert OfflineModel().reply(request("remember that I like x", extra=[call, tool])) == Text(
        expected
    )


def test_memory_entries_parse_the_rendered_block() -> None:
    """The block the application renders parses back into its entries."""
    parsed = memory_entries("intro\n" + render_block(SNAPSHOT, TAGS) + "\noutro")
    assert parsed == {"user": list(SNAPSHOT.user), "memory": list(SNAPSHOT.memory), "project": []}
    in_project = Snapshot(user=("Ada.",), project=("Uses Go.",), targets=("user", "project"))
    parsed = memory_entries(render_block(in_project, TAGS))
    assert parsed == {"user": ["Ada."], "memory": [], "project": ["Uses Go."]}


def test_memory_entries_end_only_at_the_turn_tag() -> None:
    """An entry that spells a closing tag with another nonce, newlines and quotes is read back
    as one entry: the block ends at the opening tag's own closing tag."""
    other = BlockTags("ab" * 16)
    tricky = f'The user wrote {other.close}\n"USER PROFILE [1% - 1/1375 characters]"'
    parsed = memory_entries(
        render_block(Snapshot(memory=("Fact.", "x")), TAGS).replace('"x"', json.dumps(tricky))
    )
    assert parsed["memory"] == ["Fact.", tricky]


async def test_streams_through_the_openai_sdk_word_by_word_with_split_tool_calls() -> None:
    """The transport speaks the OpenAI streaming format: role/content deltas, tool-call
    fragments by index across chunks, finish_reason, usage and [DONE]."""
    calls = ToolCalls(
        (
            ToolCall(
                "memory_update",
                {"operations": [{"target": "memory", "action": "add", "content": "Fact one."}]},
                "c1",
            ),
            ToolCall("memory_update", '{"operations": []}', "c2"),
        ),
        text="Saving two things now.",
    )

    async def responder(_request: ChatRequest) -> ToolCalls:
        return calls

    client = AsyncOpenAI(
        base_url="http://offline.invalid/v1",
        api_key="x",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=ChatCompletionsTransport(responder)),
    )
    stream = await client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    contents: list[str] = []
    fragments: dict[int, list[str]] = {}
    finish, usage = None, None
    async for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            if choice.delta.content:
                contents.append(choice.delta.content)
            for delta in choice.delta.tool_calls or ():
                fragments.setdefault(delta.index, []).append(
                    delta.function.arguments if delta.function and delta.function.arguments else ""
                )
            finish = choice.finish_reason or finish
    await client.close()
    assert contents == ["Saving ", "two ", "things ", "now."]
    assert finish == "tool_calls" and usage is not None and usage.total_tokens > 0
    assert all(len([piece for piece in pieces if piece]) > 1 for pieces in fragments.values())
    assert json.loads("".join(fragments[0]))["operations"][0]["content"] == "Fact one."
    assert "".join(fragments[1]) == '{"operations": []}'


async def test_answers_non_streamed_requests() -> None:
    """A request without `stream` gets one chat.completion object."""
    client = AsyncOpenAI(
        base_url="http://offline.invalid/v1",
        api_key="x",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=ChatCompletionsTransport(OfflineModel())),
    )
    completion = await client.chat.completions.create(
        model="offline-memory-1", messages=[{"role": "user", "content": "hello"}]
    )
    await client.close()
    assert completion.choices[0].message.content == OFFLINE_NOTICE
    assert completion.choices[0].finish_reason == "stop"


async def test_the_standalone_server_speaks_the_same_protocol_over_http() -> None:
    """scripts/offline_model.py serves the same model over real HTTP to any OpenAI client."""
    from scripts.offline_model import build_app
    from tests.support.server import live_server

    with live_server(build_app(delay_ms=0)) as url:  # type: ignore[arg-type]
        client = AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        stream = await client.chat.completions.create(
            model="offline-memory-1",
            messages=[
                {"role": "system", "content": render_block(SNAPSHOT, TAGS)},
                {"role": "user", "content": "remember that I like tea"},
            ],
            tools=[MEMORY_TOOL],  # type: ignore[list-item]
            stream=True,
        )
        arguments, finish = [], None
        async for chunk in stream:
            for choice in chunk.choices:
                for delta in choice.delta.tool_calls or ():
                    if delta.function and delta.function.arguments:
                        arguments.append(delta.function.arguments)
                finish = choice.finish_reason or finish
        await client.close()
    assert finish == "tool_calls"
    assert json.loads("".join(arguments))["operations"] == [
        {"target": "user", "action": "add", "content": "The user likes tea."}
    ]
