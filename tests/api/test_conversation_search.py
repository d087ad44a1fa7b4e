"""Conversation search over real HTTP on SQLite, PostgreSQL and MariaDB: the REST route reads
the caller's messages only, whatever the query text; the `conversation_search` tool (scripted
model) answers the model with the caller's bounded, untrusted-labelled results, leaves out the
turn's own message, ignores an extra `user_id`, writes no memory, goes on when the database is
down, and is never offered to the evaluation agent."""

from __future__ import annotations

import json
from typing import Any

import httpx
from sqlalchemy import Engine

from app.agent.search_tool import MAX_RESULT_CHARS, UNTRUSTED_NOTICE
from app.conversations.search_text import MARK_CLOSE, MARK_OPEN
from tests.support.apps import api_settings, closed_port_url
from tests.support.scripted import ScriptedModel, Text, ToolCall, ToolCalls, serve_with_model
from tests.support.sse import Event, first, post_chat
from tests.support.tokens import dev_auth

SEARCH = "conversation_search"
CRAFTED = [
    '"zebra',
    "zebra*",
    "NEAR(zebra stripes)",
    "zebra OR 1=1",
    "'; DROP TABLE x; --",
    "(((",
    "zebra AND NOT stripes",
    "zebra\x07",  # a NUL is 422 invalid_query (tests/api/test_input_edges.py)
    "%",
    "_",
    "z" * 3000,
    "日本語 zebra 🙂",
    "-zebra",
]


def search_call(arguments: dict[str, Any] | str, call_id: str = "call_1") -> ToolCalls:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCalls((ToolCall(SEARCH, raw, call_id),))


def chat(url: str, user: str, message: str) -> list[Event]:
    response, events = post_chat(url, dev_auth(user), {"message": message})
    assert response.status_code == 200
    return events


def search(url: str, user: str, q: str, **params: Any) -> httpx.Response:
    return httpx.get(
        f"{url}/v1/conversations/search",
        params={"q": q, **params},
        headers=dev_auth(user),
        timeout=30,
    )


def tool_answer(model: ScriptedModel, request_index: int) -> dict[str, Any]:
    message = model.requests[request_index].messages[-1]
    assert message["role"] == "tool"
    return dict(json.loads(message["content"]))


def test_the_route_finds_the_callers_messages_only(engine: Engine, db_url: str) -> None:
    """Best match first (scores descending), the match marked, message ids given; bob's rows
    never, whatever the query text (crafted syntax is 200); a blank query is 422; no token is
    401."""
    model = ScriptedModel(
        [Text("Zebra stripes are for cooling."), Text("Bob's zebra."), Text("Unrelated.")]
    )
    with serve_with_model(api_settings(db_url), model) as url:
        own = chat(url, "alice", "why do zebra have stripes")[0].data["conversation_id"]
        chat(url, "bob", "zebra stripes secret of bob")
        chat(url, "alice", "what is for lunch")
        found = search(url, "alice", "zebra stripes")
        crafted = [search(url, "alice", q) for q in CRAFTED]
        blank = [search(url, "alice", q) for q in ("", "   ", "\t\n")]
        anonymous = httpx.get(f"{url}/v1/conversations/search", params={"q": "zebra"})
        too_many = search(url, "alice", "zebra", limit=51)
        read = httpx.get(f"{url}/v1/conversations/{own}", headers=dev_auth("alice"))
    results = found.json()["results"]
    assert found.status_code == 200 and len(results) == 2
    assert {r["conversation_id"] for r in results} == {own}
    assert set(results[0]) == {
        "conversation_id",
        "message_id",
        "title",
        "role",
        "snippet",
        "created_at",
        "score",
    }
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True) and all(isinstance(s, float) for s in scores)
    assert f"{MARK_OPEN}zebra{MARK_CLOSE}" in results[0]["snippet"].lower()
    assert all(isinstance(r["message_id"], int) for r in results)
    for query, response in zip(CRAFTED, crafted, strict=True):
        assert response.status_code == 200, query
        assert all(r["conversation_id"] == own for r in response.json()["results"]), query
    assert [r.status_code for r in blank] == [422, 422, 422]
    assert blank[0].json()["error"]["code"] == "empty_query"
    assert anonymous.status_code == 401 and too_many.status_code == 422
    assert read.status_code == 200  # /search did not shadow /{conversation_id}


def test_deleting_a_conversation_removes_its_hits(engine: Engine, db_url: str) -> None:
    model = ScriptedModel([Text("Noted.")])
    with serve_with_model(api_settings(db_url), model) as url:
        conversation = chat(url, "alice", "the quokka itinerary")[0].data["conversation_id"]
        before = search(url, "alice", "quokka").json()["results"]
        httpx.delete(f"{url}/v1/conversations/{conversation}", headers=dev_auth("alice"))
        after = search(url, "alice", "quokka").json()["results"]
    assert len(before) == 1 and after == []


def test_the_tool_answers_the_model_with_the_callers_bounded_results(
    engine: Engine, db_url: str
) -> None:
    """The results reach the model, labelled untrusted, bounded and without the match marks
    (« » are for the person's search view; a model given them copies them into its answer,
    issue 34); bob's message and the
    turn's own message are not among them; an extra `user_id` (bob) changes nothing; the
    event counts the results; memory stays empty."""
    model = ScriptedModel(
        [
            Text("Stored."),
            Text("Stored too."),
            Text("Bob stored."),
            search_call({"query": "okapi", "limit": 10}),
            Text("Found it."),
            search_call({"query": "okapi", "limit": 10, "user_id": "bob"}, "call_2"),
            Text("Found it again."),
        ]
    )
    with serve_with_model(api_settings(db_url), model) as url:
        chat(url, "alice", "the okapi enclosure is in zone four " + "long text " * 400)
        chat(url, "alice", "okapi feeding is at noon")
        chat(url, "bob", "okapi secret belonging to bob")
        plain = chat(url, "alice", "what did we say about the okapi?")
        spoofed = chat(url, "alice", "and the okapi again?")
        memory = httpx.get(f"{url}/v1/memory", headers=dev_auth("alice")).json()
    answer, again = tool_answer(model, 4), tool_answer(model, 6)
    assert SEARCH in model.requests[3].tool_names
    assert answer["status"] == "found" and answer["notice"] == UNTRUSTED_NOTICE
    snippets = [result["snippet"] for result in answer["results"]]
    assert len(snippets) == 2 and all("okapi" in s for s in snippets)
    assert not any("bob" in s or "what did we say" in s for s in snippets)
    assert not any(mark in s for s in snippets for mark in (MARK_OPEN, MARK_CLOSE))
    assert len(model.requests[4].messages[-1]["content"]) <= MAX_RESULT_CHARS
    assert first(plain, "tool").data == {"name": SEARCH, "outcome": "found", "result_count": 2}
    # The spoofed owner changes nothing; the earlier search turn's question is found now.
    assert not any("bob" in result["snippet"] for result in again["results"])
    assert len(again["results"]) == 3
    assert first(spoofed, "tool").data["result_count"] == 3
    assert first(plain, "memory").data["outcome"] == "none"
    assert memory["user"]["entries"] == [] and memory["memory"]["entries"] == []
    model.assert_done()


def test_bad_arguments_are_rejected_and_nothing_found_is_none(engine: Engine, db_url: str) -> None:
    model = ScriptedModel(
        [
            search_call({"query": "   "}),
            Text("Bad."),
            search_call({"query": "okapi", "limit": 11}),
            Text("Bad."),
            search_call("not json"),
            Text("Bad."),
            search_call({"query": "nothingmatchesthis"}),
            Text("None."),
        ]
    )
    with serve_with_model(api_settings(db_url), model) as url:
        events = [chat(url, "alice", f"question {n}") for n in range(4)]
    outcomes = [first(e, "tool").data for e in events]
    assert [o["outcome"] for o in outcomes] == ["rejected", "rejected", "rejected", "none"]
    assert [tool_answer(model, i)["status"] for i in (1, 3, 5, 7)] == [
        "rejected",
        "rejected",
        "rejected",
        "none",
    ]
    assert all(o["result_count"] == 0 for o in outcomes)
    # Invariant: the invalid-JSON reason names this tool's own arguments, not the memory tool's.
    invalid = tool_answer(model, 5)["message"]
    assert "'query'" in invalid and "operations" not in invalid
    model.assert_done()


def test_arguments_past_the_bound_are_dropped_while_streaming(engine: Engine, db_url: str) -> None:
    """Invariant: a search call's arguments of LLM_MAX_TOOL_ARGUMENT_CHARS are read; one more
    character and they are refused as too large and never echoed back to the model."""
    bound = 2048
    at_bound = '{"query": "okapi", "pad": "' + "x" * (bound - 29) + '"}'
    assert len(at_bound) == bound
    past = at_bound[:-2] + 'x"}'
    model = ScriptedModel([search_call(at_bound), Text("Ok."), search_call(past), Text("No.")])
    with serve_with_model(api_settings(db_url, llm_max_tool_argument_chars=bound), model) as url:
        events = [chat(url, "alice", f"question {n}") for n in range(2)]
    assert [first(e, "tool").data["outcome"] for e in events] == ["none", "rejected"]
    assert tool_answer(model, 3)["code"] == "arguments_too_large"
    echoed = model.requests[3].messages[-2]["tool_calls"][0]["function"]["arguments"]
    assert echoed == "{}"
    model.assert_done()


def test_offered_with_memory_off_and_never_to_the_eval_agent(engine: Engine, db_url: str) -> None:
    """Search reads transcripts, not memory: offered while the memory flag is off. The
    evaluation agent is offered no tool, and a search call it makes anyway is refused."""
    model = ScriptedModel([Text("Hi."), search_call({"query": "anything"}), Text("Refused.")])
    settings = api_settings(db_url, memory_enabled=False, eval_api_key="k" * 32)
    with serve_with_model(settings, model) as url:
        chat(url, "alice", "hello")
        _, evaluated = post_chat(
            url, {"X-Eval-Key": "k" * 32}, {"message": "hi"}, path="/v1/eval/chat"
        )
    assert model.requests[0].tool_names == frozenset({SEARCH})
    assert model.requests[1].tools == ()
    assert first(evaluated, "tool").data == {
        "name": SEARCH,
        "outcome": "rejected",
        "result_count": 0,
    }
    assert tool_answer(model, 2)["code"] == "tool_not_offered"
    model.assert_done()


def test_with_the_database_down_the_tool_says_unavailable_and_the_turn_answers() -> None:
    model = ScriptedModel([search_call({"query": "okapi"}), Text("Cannot look it up.")])
    with serve_with_model(api_settings(closed_port_url()), model) as url:
        events = chat(url, "alice", "what did we say about the okapi?")
    assert first(events, "tool").data == {"name": SEARCH, "outcome": "none", "result_count": 0}
    assert tool_answer(model, 1)["status"] == "unavailable"
    assert events[-1].event == "done"
    model.assert_done()
