"""`GET /metrics` over real HTTP: the series move as turns complete, fail and are cut; reads
that fail open and limit checks that cannot reach the database are counted; no label carries
a subject, an id or content, and the number of series does not grow with users."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

from app.main import create_app
from tests.support.apps import api_settings, closed_port_url
from tests.support.gates import Gates
from tests.support.openai_sdk import MODEL, user_says
from tests.support.scripted import HeldText, HttpError, ScriptedModel, Text, memory_call
from tests.support.server import free_port, live_server
from tests.support.sse import post_chat
from tests.support.tokens import dev_auth
from tests.support.waiting import wait_for
from tests.telemetry.capture import capture_telemetry

PINNED = datetime(2026, 12, 3, 12, 0, 20, tzinfo=UTC)
Found = dict[tuple[str, tuple[tuple[str, str], ...]], float]
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def samples(base_url: str, client: httpx.Client | None = None) -> Found:
    """Every sample of the exposition, by name and labels (through `client`'s connection)."""
    response = (client or httpx).get(f"{base_url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


@contextmanager
def server(db_url: str, model: ScriptedModel | None = None, **settings: object) -> Iterator[str]:
    transport = model.transport() if model is not None else None
    app: FastAPI = create_app(api_settings(db_url, **settings), model_transport=transport)
    with live_server(app) as url:
        # One minute for every turn of a test: the per-minute limit must not renew midway.
        app.state.runtime.limits.clock = lambda: PINNED
        yield url


def test_metrics_move_as_turns_complete_fail_and_are_cut(engine: Engine, db_url: str) -> None:
    """Four turns: one that commits a memory edit, one plain, one whose model fails and one
    whose client leaves mid-answer. Turn outcomes, the error code, the commit outcomes and
    duration, time to first token, turn durations, tokens and HTTP statuses each move by
    exactly what happened; the open-streams gauge counts the held stream and returns. (The
    `engine` fixture empties the database first: a flag an earlier test left off would turn
    memory off here.)"""
    gates = Gates()
    model = ScriptedModel(
        [
            memory_call({"target": "user", "action": "add", "content": "The user likes figs."}),
            Text("Saved."),
            Text("Plain answer."),
            HttpError(500),
            HeldText("A long answer that is cut.", gates, "cut"),
        ]
    )
    user = f"metrics-{uuid.uuid4().hex[:8]}"
    with server(db_url, model) as url:
        before = samples(url)
        for message in ("remember that I like figs", "hello", "fail please"):
            response, _events = post_chat(url, dev_auth(user), {"message": message})
            assert response.status_code == 200
        with (
            httpx.Client(base_url=url, timeout=30) as client,
            client.stream("POST", "/v1/chat", json={"message": "x"}, headers=dev_auth(user)),
        ):
            wait_for(lambda: "cut" in gates.held, "the answer held before its end")
            during = samples(url)
        wait_for(lambda: "cut" in gates.abandoned, "the cut turn cancelled")
        wait_for(
            lambda: (
                value(samples(url), "amem_turns_total", agent="chat", outcome="interrupted")
                > value(before, "amem_turns_total", agent="chat", outcome="interrupted")
            ),
            "the cut turn counted",
        )
        after = samples(url)
    model.assert_done()

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("amem_turns_total", agent="chat", outcome="complete") == 2
    assert moved("amem_turns_total", agent="chat", outcome="error") == 1
    assert moved("amem_turns_total", agent="chat", outcome="interrupted") == 1
    assert moved("amem_turn_errors_total", code="model_error") == 1
    assert moved("amem_turn_duration_seconds_count", agent="chat") == 4
    assert moved("amem_memory_commits_total", outcome="committed") == 1
    assert moved("amem_memory_commit_duration_seconds_count") >= 1
    assert moved("amem_model_time_to_first_token_seconds_count") >= 3
    assert moved("amem_model_tokens_total", kind="completion") > 0
    assert moved("amem_http_requests_total", method="POST", route="/v1/chat", status="200") == 4
    assert value(during, "amem_open_streams") - value(before, "amem_open_streams") == 1
    assert value(after, "amem_open_streams") == value(before, "amem_open_streams")
    assert value(after, "amem_memory_flag", state="enabled") == 1


def test_a_database_that_is_down_is_counted_and_the_turn_still_answers() -> None:
    """With the database unreachable, a turn answers (memory unavailable): the failed-open
    memory read and the limit check that could not run are each counted once."""
    with server(closed_port_url(), user_turns_per_minute=5) as url:
        before = samples(url)
        response, events = post_chat(url, dev_auth("down"), {"message": "hello"})
        after = samples(url)
    assert response.status_code == 200
    assert events[0].data["memory"]["status"] == "unavailable"
    assert (
        value(after, "amem_memory_reads_failed_open_total", source="flag")
        - value(before, "amem_memory_reads_failed_open_total", source="flag")
        == 1
    )
    assert (
        value(after, "amem_limit_checks_failed_total")
        - value(before, "amem_limit_checks_failed_total")
        == 1
    )


SENTINEL = "zq7sentinel"


def traffic(url: str, users: list[str]) -> list[str]:
    """The same kinds of requests for each user: turns, a conversation read, a 404 by id,
    an unknown path with a query and a refused turn. Returns the conversation ids."""
    conversations = []
    for user in users:
        auth = dev_auth(user)
        response, events = post_chat(url, auth, {"message": f"remember that I like {SENTINEL} tea"})
        assert response.status_code == 200
        conversation = events[0].data["conversation_id"]
        conversations.append(conversation)
        httpx.get(f"{url}/v1/conversations/{conversation}", headers=auth)
        httpx.get(f"{url}/v1/conversations/{SENTINEL}-{user}", headers=auth)
        httpx.get(f"{url}/v1/conversations/search", params={"q": SENTINEL}, headers=auth)
        httpx.get(f"{url}/{SENTINEL}/{user}?q={SENTINEL}", headers=auth)
        refused = {"message": "over", "conversation_id": conversation}
        assert httpx.post(f"{url}/v1/chat", json=refused, headers=auth).status_code == 429
    return conversations


def test_no_label_carries_a_subject_an_id_or_content_and_series_do_not_grow_with_users(
    engine: Engine, db_url: str
) -> None:
    """Users whose subjects, messages, memory, URLs and queries carry a sentinel: the
    exposition never contains it nor any conversation id; serving three times as many users
    adds no series (labels are closed sets)."""
    with server(db_url, user_turns_per_minute=1) as url:
        first = [f"{SENTINEL}-user-{n}-{uuid.uuid4().hex[:6]}" for n in range(2)]
        samples(url)  # the scrape's own request is a series too: counted from here on
        ids = traffic(url, first)
        series = set(samples(url))
        later = [f"{SENTINEL}-user-{n}-{uuid.uuid4().hex[:6]}" for n in range(6)]
        ids += traffic(url, later)
        text = httpx.get(f"{url}/metrics").text
        assert sorted(set(samples(url)) - series) == []
    assert SENTINEL not in text
    for user in first + later:
        assert user not in text
    assert not any(conversation in text for conversation in ids)
    assert UUID.search(text) is None


# A turn in each stream protocol: (path, body) and the bytes its body ends with.
STREAMS = {
    "native": ("/v1/chat", lambda text: {"message": text}, b"event: done"),
    "ai-sdk": (
        "/v1/chat?protocol=ai-sdk",
        lambda text: {"messages": [{"role": "user", "parts": [{"type": "text", "text": text}]}]},
        b"data: [DONE]",
    ),
    "openai": (
        "/openai/v1/chat/completions",
        lambda text: {"model": MODEL, "messages": user_says(text), "stream": True},
        b"data: [DONE]",
    ),
}


@pytest.mark.parametrize("protocol", list(STREAMS))
def test_a_turns_bookkeeping_is_in_place_before_the_client_asks_for_it(
    engine: Engine, db_url: str, protocol: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """The response ends with `done` (and its protocol's trailer), and the turn's last log line
    and metrics come after the body's end, yet before the service reads anything the client
    sends next: a client that asks for /metrics on the same connection as soon as each body
    ends finds that turn counted and its `turn.finished` line written, every time."""
    path, body, ending = STREAMS[protocol]
    turns = 12
    model = ScriptedModel([Text(f"Answer {n}.") for n in range(turns)])
    user = f"metrics-{uuid.uuid4().hex[:8]}"
    complete = {"agent": "chat", "outcome": "complete"}
    with (
        capture_telemetry(capfd) as captured,
        server(db_url, model) as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        before = value(samples(url), "amem_turns_total", **complete)
        for n in range(1, turns + 1):
            with client.stream(
                "POST", path, json=body(f"turn {n}"), headers=dev_auth(user)
            ) as response:
                assert response.status_code == 200
                received = response.read()
            assert re.split(rb"\r?\n\r?\n", received.strip())[-1].startswith(ending)
            counted = value(samples(url, client), "amem_turns_total", **complete)
            assert captured.events().count("turn.finished") == n
            assert counted - before == n
    model.assert_done()


def test_metrics_are_served_on_their_own_port(engine: Engine, db_url: str) -> None:
    """With METRICS_PORT, the exposition is served on that port by its own listener, bound to
    loopback unless the operator says otherwise, and no longer on the public port (which stops
    with the app), so it is private."""
    port = free_port()
    with server(db_url, metrics_port=port) as url:
        post_chat(url, dev_auth("port-user"), {"message": "hello"})
        own = httpx.get(f"http://127.0.0.1:{port}/metrics")
        assert own.status_code == 200
        assert "amem_turns_total" in own.text
        assert httpx.get(f"{url}/metrics").status_code == 404
    try:
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    except httpx.TransportError:
        return
    raise AssertionError("the metrics listener outlived its app")


def test_the_metrics_listener_binds_loopback_unless_opened() -> None:
    """A private listener is private by default: METRICS_HOST defaults to loopback, and the
    public port keeps /metrics only while there is no private listener, or when asked."""
    settings = api_settings("sqlite://")
    assert settings.metrics_host == "127.0.0.1"
    assert settings.metrics_on_main_port
    with_port = settings.model_copy(update={"metrics_port": 9464})
    assert not with_port.metrics_on_main_port
    assert with_port.model_copy(update={"metrics_public": True}).metrics_on_main_port
    assert not settings.model_copy(update={"metrics_public": False}).metrics_on_main_port


def test_metrics_public_keeps_the_exposition_on_both_ports(engine: Engine, db_url: str) -> None:
    """METRICS_PUBLIC=true serves /metrics on the main port beside the private listener."""
    port = free_port()
    with server(db_url, metrics_port=port, metrics_public=True) as url:
        assert httpx.get(f"{url}/metrics").status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/metrics").status_code == 200
