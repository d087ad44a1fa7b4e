"""The design's turn invariants, each proven through real uvicorn and real SSE, on SQLite,
PostgreSQL and MariaDB."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, insert

from app.db.schema import agent_memory
from app.db.writers import maintenance
from app.memory.rules import SEPARATOR, Snapshot
from app.offline.wire import ChatRequest
from tests.support.apps import api_settings, memory_rows
from tests.support.databases import stored
from tests.support.scripted import (
    BrokenStream,
    HttpError,
    Reply,
    ScriptedModel,
    Text,
    memory_call,
    routed_transport,
    serve_with_model,
)
from tests.support.sse import apost_chat, first, names, post_chat, without_deltas
from tests.support.tokens import dev_auth

FACT = {"target": "user", "action": "add", "content": "The user prefers short answers."}
DEADLINE_SECONDS = 15.0


def put(engine: Engine, user: str, target: str, *entries: str) -> None:
    with engine.begin() as connection, maintenance(connection):
        connection.execute(
            insert(agent_memory).values(
                user_id=user, memory_type=target, content=SEPARATOR.join(entries)
            )
        )


def wait_for_message(url: str, user: str, conversation_id: str, status: str) -> dict[str, Any]:
    """Poll the transcript (with a deadline) until the assistant message has `status`."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while time.monotonic() < deadline:
        body = httpx.get(f"{url}/v1/conversations/{conversation_id}", headers=dev_auth(user)).json()
        for message in body.get("messages", []):
            if message["role"] == "assistant" and message["status"] == status:
                return dict(message)
        time.sleep(0.05)
    raise AssertionError(f"no assistant message with status {status!r} before the deadline")


# -- the owner -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(memory_call(FACT, user_id="bob"), id="top-level-user_id"),
        pytest.param(memory_call({**FACT, "user_id": "bob"}), id="operation-user_id"),
    ],
)
def test_the_tool_cannot_accept_or_override_the_owner(
    engine: Engine, db_url: str, call: Reply
) -> None:
    """A memory_update call carrying a user_id is rejected; nothing is written for anyone."""
    model = ScriptedModel([call, Text("I could not save that.")])
    with serve_with_model(api_settings(db_url), model) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "save for bob"})
    assert first(events, "tool").data["outcome"] == "rejected"
    assert first(events, "memory").data["outcome"] == "none"
    assert "user_id" in json.loads(model.requests[1].messages[-1]["content"])["reason"]
    assert memory_rows(engine) == 0
    model.assert_done()


async def test_concurrent_turns_of_two_users_never_see_each_others_memory(
    engine: Engine, db_url: str
) -> None:
    """Two users' turns in flight at once: each prompt holds only its own sentinel, and each
    staged write lands in its own owner's memory."""
    put(engine, "alice", "user", "The user is sentinel-ALICE-91.")
    put(engine, "bob", "user", "The user is sentinel-BOB-27.")
    arrived: list[str] = []
    both_in_flight: dict[str, asyncio.Event] = {}

    async def first_round(request: ChatRequest) -> Reply:
        who = str(request.messages[-1]["content"]).split()[-1]
        event = both_in_flight.setdefault("gate", asyncio.Event())
        arrived.append(who)
        if len(arrived) == 2:
            event.set()
        await asyncio.wait_for(event.wait(), DEADLINE_SECONDS)  # both turns are open now
        return memory_call(
            {"target": "memory", "action": "add", "content": f"Fact staged by {who}."}
        )

    model = ScriptedModel([first_round, first_round, Text("ok"), Text("ok")])
    with serve_with_model(api_settings(db_url), model) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            results = await asyncio.gather(
                apost_chat(client, dev_auth("alice"), {"message": "hello from alice"}),
                apost_chat(client, dev_auth("bob"), {"message": "hello from bob"}),
            )
    for events in results:
        assert names(events)[-1] == "done"
        assert first(events, "memory").data["outcome"] == "committed"
    prompts = {
        str(r.messages[-1]["content"]).split()[-1]: r.system_text()
        for r in model.requests
        if r.messages[-1]["role"] == "user"
    }
    assert "sentinel-ALICE-91" in prompts["alice"] and "sentinel-BOB-27" not in prompts["alice"]
    assert "sentinel-BOB-27" in prompts["bob"] and "sentinel-ALICE-91" not in prompts["bob"]
    assert stored(engine, "alice").memory == ("Fact staged by alice.",)
    assert stored(engine, "bob").memory == ("Fact staged by bob.",)
    model.assert_done()


# -- nothing of an unfinished turn is committed ----------------------------------------------


def test_a_model_error_after_staging_commits_nothing_and_runs_no_fallback(
    engine: Engine, db_url: str
) -> None:
    """Staged, then the model fails: error event, nothing committed, the fallback is never
    called, the transcript marks the answer failed."""
    primary = ScriptedModel([memory_call(FACT), HttpError(500)], name="primary")
    fallback = ScriptedModel([], name="fallback")
    settings = api_settings(db_url, llm_model="primary", llm_fallback_model="fallback")
    transport = routed_transport({"primary": primary, "fallback": fallback})
    with serve_with_model(settings, transport=transport) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "remember that"})
        assert names(events) == ["start", "tool", "error"]
        assert events[-1].data["code"] == "model_error"
        wait_for_message(url, "alice", events[0].data["conversation_id"], "failed")
    assert memory_rows(engine) == 0
    assert fallback.calls == 0
    primary.assert_done()
    fallback.assert_done()


def test_with_nothing_staged_the_fallback_model_answers(engine: Engine, db_url: str) -> None:
    """The primary fails before staging or streaming anything: the fallback answers the turn."""
    primary = ScriptedModel([HttpError(503)], name="primary")
    fallback = ScriptedModel([Text("Answered by the fallback.")], name="fallback")
    settings = api_settings(db_url, llm_model="primary", llm_fallback_model="fallback")
    transport = routed_transport({"primary": primary, "fallback": fallback})
    with serve_with_model(settings, transport=transport) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "hi"})
    assert without_deltas(events) == ["start", "delta", "memory", "sources", "done"]
    assert "".join(e.data["text"] for e in events if e.event == "delta") == (
        "Answered by the fallback."
    )
    primary.assert_done()
    fallback.assert_done()


def test_a_broken_model_stream_ends_in_error_and_commits_nothing(
    engine: Engine, db_url: str
) -> None:
    """The stream breaks midway after staging: the partial text was shown, then `error`."""
    model = ScriptedModel([memory_call(FACT), BrokenStream("Saved your prefer")])
    with serve_with_model(api_settings(db_url), model) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "remember that"})
        assert without_deltas(events) == ["start", "tool", "delta", "error"]
        assert events[-1].data["code"] == "model_stream_broken"
        failed = wait_for_message(url, "alice", events[0].data["conversation_id"], "failed")
    assert failed["content"] == "Saved your prefer"
    assert memory_rows(engine) == 0
    model.assert_done()


def test_a_timeout_ends_in_error_and_commits_nothing(engine: Engine, db_url: str) -> None:
    """The model hangs past TURN_TIMEOUT_SECONDS after staging: `error` with code timeout."""
    from tests.support.scripted import Hang

    model = ScriptedModel([memory_call(FACT), Hang()])
    with serve_with_model(api_settings(db_url, turn_timeout_seconds=1), model) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "remember that"})
    assert names(events) == ["start", "tool", "error"]
    assert events[-1].data["code"] == "timeout"
    assert memory_rows(engine) == 0
    model.assert_done()


# -- the loop's bounds ---------------------------------------------------------------------------


def test_the_round_limit_ends_with_tool_limit_and_commits_nothing(
    engine: Engine, db_url: str
) -> None:
    """A model that keeps calling tools stops at LLM_MAX_ROUNDS with finish_reason tool_limit.
    There is no final answer, so what earlier rounds staged is discarded (`failed`, reason
    `tool_limit`); the last call is not run."""
    put(engine, "alice", "memory", "Stored before the turn.")
    second = {"target": "memory", "action": "add", "content": "Never staged."}
    model = ScriptedModel([memory_call(FACT), memory_call(second)])
    with serve_with_model(api_settings(db_url, llm_max_rounds=2), model) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "remember that"})
    assert names(events) == ["start", "tool", "memory", "sources", "done"]
    assert events[-1].data == {"finish_reason": "tool_limit"}
    assert first(events, "memory").data == {
        "outcome": "failed",
        "reason": "tool_limit",
        "user_characters": 0,
        "memory_characters": len("Stored before the turn."),
    }
    assert stored(engine, "alice") == Snapshot(memory=("Stored before the turn.",))
    model.assert_done()


def test_an_answer_cut_by_the_token_limit_commits_nothing(engine: Engine, db_url: str) -> None:
    """`length`: the answer was cut before it finished, so it is not a final answer; the staged
    edit is discarded (`failed`, reason `length`) and the turn still ends with `done`."""
    model = ScriptedModel([memory_call(FACT), Text("Saved, and then I was cu", "length")])
    with serve_with_model(api_settings(db_url), model) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "remember that"})
    assert without_deltas(events) == ["start", "tool", "delta", "memory", "sources", "done"]
    assert events[-1].data == {"finish_reason": "length"}
    assert first(events, "memory").data["outcome"] == "failed"
    assert first(events, "memory").data["reason"] == "length"
    assert memory_rows(engine) == 0
    model.assert_done()


def test_after_three_rejections_the_model_is_told_to_stop(engine: Engine, db_url: str) -> None:
    """The third rejected call's result tells the model to stop trying and answer."""
    bad = {"target": "user", "action": "remove", "match": "absent"}
    model = ScriptedModel([memory_call(bad)] * 3 + [Text("Sorry.")])
    with serve_with_model(api_settings(db_url), model) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "forget absent"})
    assert [e.data["outcome"] for e in events if e.event == "tool"] == ["rejected"] * 3
    results = [json.loads(r.messages[-1]["content"]) for r in model.requests[1:]]
    assert ["instruction" in result for result in results] == [False, False, True]
    assert "Stop calling memory_update" in results[2]["instruction"]
    model.assert_done()


def test_a_full_memory_consolidates_in_one_batch(engine: Engine, db_url: str) -> None:
    """At capacity, an add alone is rejected; replace-then-add in one batch succeeds, because
    capacity is checked after the whole batch."""
    long_entry = "The user works on " + "x" * 1340 + "."
    put(engine, "alice", "user", long_entry)
    new = {"target": "user", "action": "add", "content": "The user prefers tea."}
    shorten = {
        "target": "user",
        "action": "replace",
        "match": "The user works on",
        "content": "The user works on compilers.",
    }
    model = ScriptedModel([memory_call(new), memory_call(shorten, new), Text("Done.")])
    with serve_with_model(api_settings(db_url), model) as url:
        _, events = post_chat(url, dev_auth("alice"), {"message": "I prefer tea"})
    assert [e.data["outcome"] for e in events if e.event == "tool"] == ["rejected", "staged"]
    assert first(events, "memory").data["outcome"] == "committed"
    assert stored(engine, "alice").user == ("The user works on compilers.", "The user prefers tea.")
    model.assert_done()


# -- concurrency ---------------------------------------------------------------------------------


async def test_ten_concurrent_turns_of_one_user_keep_all_ten_facts(
    engine: Engine, db_url: str
) -> None:
    """Ten turns of one user, each adding a fact through the offline model, all at once: the
    commit replays each batch on the latest snapshot, so all ten facts are kept."""
    settings = api_settings(db_url)
    with serve_with_model(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            results = await asyncio.gather(
                *(
                    apost_chat(
                        client,
                        dev_auth("dana"),
                        {"message": f"remember that fact number {n} holds"},
                    )
                    for n in range(10)
                )
            )
    for events in results:
        assert first(events, "memory").data["outcome"] == "committed", names(events)
    assert sorted(stored(engine, "dana").memory) == sorted(
        f"Fact number {n} holds." for n in range(10)
    )
