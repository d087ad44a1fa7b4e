"""Per-caller limits over real HTTP on every database: one limit shared by two replicas, exact
refusals under a burst, slots freed by streams that end (cut ones included), the per-minute and
daily budgets, the OpenAI error shape, and the evaluation route's own allowance."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, date, datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import Connection, Engine

from app.conversations import repository
from app.main import create_app
from app.operators import usage
from app.operators.limits import Admission, Caller, LimitStore
from tests.support.apps import api_settings
from tests.support.gates import Gates
from tests.support.scripted import HeldText, ScriptedModel, Text
from tests.support.server import live_server
from tests.support.tokens import dev_auth
from tests.support.waiting import await_for, wait_for

ANSWER = "A short answer, held before its last word."
# 12:00:20 UTC: 40 s left in the minute, 11 h 59 min 40 s to midnight.
PINNED = datetime(2026, 12, 3, 12, 0, 20, tzinfo=UTC)
EVAL_KEY = "eval-key-for-limit-tests-0123456789"


@contextmanager
def replicas(
    db_url: str, models: list[ScriptedModel], **limits: Any
) -> Iterator[list[tuple[str, LimitStore]]]:
    """One live server per model, all on one database: replicas of one service. Yields each
    one's URL and limit store (whose clock a test may pin)."""
    with ExitStack() as stack:
        served = []
        for model in models:
            app: FastAPI = create_app(
                api_settings(db_url, eval_api_key=EVAL_KEY, **limits),
                model_transport=model.transport(),
            )
            url = stack.enter_context(live_server(app))
            # FastAPI builds its routes on the first request; two servers doing so at once in
            # their threads race inside pydantic. An unknown path builds every route, here.
            assert httpx.get(f"{url}/warm-up").status_code == 404
            served.append((url, app.state.runtime.limits))
        yield served


def pin(stores: list[tuple[str, LimitStore]], moment: datetime) -> None:
    for _url, store in stores:
        store.clock = lambda: moment


def refusal(response: httpx.Response, limit_words: str) -> None:
    assert response.status_code == 429, response.text
    assert response.json()["error"]["code"] == "rate_limited"
    assert limit_words in response.json()["error"]["message"]
    assert int(response.headers["retry-after"]) >= 1
    assert response.headers["content-type"].startswith("application/json")


async def test_a_burst_over_the_stream_limit_across_two_replicas_gets_exactly_the_excess_refused(
    db_url: str,
) -> None:
    """Seven simultaneous turns of one user, spread over two replicas, with three streams
    allowed: exactly three are served (held open at the model) and four answer 429
    `rate_limited` with Retry-After before any stream opens; the refused ones never reach a
    model. When the held streams end, their slots are free and the next turn is served."""
    gates = Gates()
    models = [
        ScriptedModel([HeldText(ANSWER, gates, f"{side}{n}") for n in range(7)], name=side)
        for side in ("a", "b")
    ]
    user = f"burst-{uuid.uuid4().hex[:8]}"
    with replicas(db_url, models, user_max_streams=3) as stores:
        async with httpx.AsyncClient(timeout=60) as client:

            async def turn(n: int) -> tuple[int, str]:
                url = stores[n % 2][0]
                async with client.stream(
                    "POST", f"{url}/v1/chat", json={"message": "hi"}, headers=dev_auth(user)
                ) as response:
                    body = (await response.aread()).decode()
                    return response.status_code, body

            tasks = [asyncio.create_task(turn(n)) for n in range(7)]
            await await_for(lambda: len(gates.held) == 3, "three streams held at the model")
            await await_for(lambda: sum(task.done() for task in tasks) == 4, "four refusals")
            refused = [task.result() for task in tasks if task.done()]
            assert [status for status, _body in refused] == [429] * 4
            assert all('"rate_limited"' in body for _status, body in refused)
            assert stores[0][1].open_slots(Caller.user(user)) == 3
            for key in list(gates.held):
                gates.release(key)
            served = await asyncio.gather(*(task for task in tasks if not task.done()))
            assert [status for status, _body in served] == [200] * 3
            assert all("event: done" in body for _status, body in served)
            await await_for(
                lambda: stores[1][1].open_slots(Caller.user(user)) == 0, "every slot freed"
            )
            for side in "ab":
                for n in range(7):
                    gates.release(f"{side}{n}")
            after = await client.post(
                f"{stores[1][0]}/v1/chat", json={"message": "again"}, headers=dev_auth(user)
            )
            assert after.status_code == 200
    assert sum(model.calls for model in models) == 4


@pytest.mark.parametrize("protocol", ["sse", "openai"])
def test_a_cut_stream_frees_its_slot(db_url: str, protocol: str) -> None:
    """One stream allowed; a turn is held at the model and its client closes the connection
    mid-answer. The server cancels the turn and frees the slot: the user's next turn is
    served, not refused (on /v1/chat and on the OpenAI-compatible route)."""
    gates = Gates()
    model = ScriptedModel([HeldText(ANSWER, gates, "cut"), Text("Next.")])
    user = f"cut-{uuid.uuid4().hex[:8]}"
    path, body = "/v1/chat", {"message": "hi"}
    if protocol == "openai":
        path = "/openai/v1/chat/completions"
        body = {
            "model": "offline-memory-1",
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
    with (
        replicas(db_url, [model], user_max_streams=1) as [(url, store)],
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        with client.stream("POST", path, json=body, headers=dev_auth(user)) as response:
            assert response.status_code == 200
            wait_for(lambda: "cut" in gates.held, "the answer held at its last chunk")
            assert store.open_slots(Caller.user(user)) == 1
            blocked = client.post(path, json=body, headers=dev_auth(user))
            assert blocked.status_code == 429
        wait_for(lambda: "cut" in gates.abandoned, "the server cancelling the cut turn")
        wait_for(lambda: store.open_slots(Caller.user(user)) == 0, "the slot freed")
        next_turn = client.post(path, json=body, headers=dev_auth(user))
        assert next_turn.status_code == 200
    model.assert_done()


def counting_releases(store: LimitStore, monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The slots the store frees in a transaction of their own (`release`, after a response),
    as a list that grows with each one."""
    freed: list[str | None] = []
    own_release = store._release

    def release(admission: Admission) -> None:
        freed.append(admission.lease_id)
        own_release(admission)

    monkeypatch.setattr(store, "_release", release)
    return freed


@pytest.mark.parametrize("protocol", ["sse", "openai"])
def test_a_turn_frees_its_slot_in_the_transaction_that_ends_it(
    db_url: str, protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One stream allowed, two turns one after the other: each frees its slot in the
    transaction of its last row (the answer on /v1/chat, the usage on the OpenAI route), so
    the slot is already free when the response has been read, and the route has no release of
    its own left to run: no slot is freed on its own."""
    model = ScriptedModel([Text("Fine."), Text("Again.")])
    user = f"last-row-{uuid.uuid4().hex[:8]}"
    path, body = _route(protocol)
    with replicas(db_url, [model], user_max_streams=1) as [(url, store)]:
        freed = counting_releases(store, monkeypatch)
        for _ in range(2):
            response = httpx.post(f"{url}{path}", json=body, headers=dev_auth(user), timeout=30)
            assert response.status_code == 200, response.text
            assert store.open_slots(Caller.user(user)) == 0
        assert freed == []
    model.assert_done()


def test_a_last_row_that_does_not_commit_leaves_the_slot_to_the_route(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer row's transaction frees the slot and then fails: both roll back, the slot
    stays taken until the response ends, and the route frees it on its own. The turn says
    that its transcript failed; the user's next turn is served."""
    model = ScriptedModel([Text("Fine."), Text("Again.")])
    user = f"rolled-back-{uuid.uuid4().hex[:8]}"
    store_row = repository.append_message

    def failing_answer(connection: Connection, *arguments: Any) -> None:
        store_row(connection, *arguments)
        if arguments[2] == "assistant":
            raise RuntimeError("scripted: the answer row's transaction fails")

    monkeypatch.setattr(repository, "append_message", failing_answer)
    with replicas(db_url, [model], user_max_streams=1) as [(url, store)]:
        freed = counting_releases(store, monkeypatch)
        for turns in (1, 2):
            response = httpx.post(
                f"{url}/v1/chat", json={"message": "hi"}, headers=dev_auth(user), timeout=30
            )
            assert response.status_code == 200, response.text
            assert '"transcript_unavailable"' in response.text
            wait_for(lambda n=turns: len(freed) == n, "the route freeing the slot on its own")
            wait_for(lambda: store.open_slots(Caller.user(user)) == 0, "the slot freed")
    model.assert_done()


def _route(protocol: str) -> tuple[str, dict[str, Any]]:
    if protocol == "openai":
        return "/openai/v1/chat/completions", {
            "model": "offline-memory-1",
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
    return "/v1/chat", {"message": "hi"}


def test_turns_per_minute_are_shared_by_replicas_and_renew_with_the_minute(db_url: str) -> None:
    """Three turns a minute, sent alternately to two replicas: the first three are served, the
    next two refused with Retry-After = the seconds left in the minute; a refused turn uses
    none of the allowance, and the next minute serves again. Another user is unaffected."""
    user, other = f"minute-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
    # Which replica serves which turn is fixed below; neither script must run out.
    models = [ScriptedModel([Text("Fine.")] * 4, name=side) for side in ("a", "b")]
    with replicas(db_url, models, user_turns_per_minute=3) as stores:
        pin(stores, PINNED)
        statuses = []
        for n in range(5):
            response = httpx.post(
                f"{stores[n % 2][0]}/v1/chat", json={"message": "hi"}, headers=dev_auth(user)
            )
            statuses.append(response.status_code)
            if response.status_code == 429:
                refusal(response, "3 a minute")
                assert response.headers["retry-after"] == "40"
        assert statuses == [200, 200, 200, 429, 429]
        assert httpx.post(
            f"{stores[0][0]}/v1/chat", json={"message": "hi"}, headers=dev_auth(other)
        ).is_success
        pin(stores, PINNED.replace(minute=1))
        for n in range(2):
            response = httpx.post(
                f"{stores[n][0]}/v1/chat", json={"message": "hi"}, headers=dev_auth(user)
            )
            assert response.status_code == 200
    assert sum(model.calls for model in models) == 6


@pytest.mark.parametrize("streams", [0, 2], ids=["budget-alone", "with-stream-slots"])
def test_a_spent_daily_budget_refuses_until_midnight(
    engine: Engine, db_url: str, streams: int
) -> None:
    """The day's recorded usage reaches the budget: the user's next turn answers 429 with
    Retry-After until midnight UTC; below the budget (or another day) turns are served. Alone,
    or checked together with the stream slot in one statement."""
    user, light = f"budget-{uuid.uuid4().hex[:8]}", f"light-{uuid.uuid4().hex[:8]}"
    with engine.begin() as connection:
        usage.record(connection, usage.TurnUsage(user, 600, 400), date(2026, 12, 3))
        usage.record(connection, usage.TurnUsage(light, 600, 399), date(2026, 12, 3))
    model = ScriptedModel([Text("Fine."), Text("Fine.")])
    with replicas(db_url, [model], user_daily_tokens=1000, user_max_streams=streams) as stores:
        pin(stores, PINNED)
        url = stores[0][0]
        refused = httpx.post(f"{url}/v1/chat", json={"message": "hi"}, headers=dev_auth(user))
        refusal(refused, "1,000 tokens")
        assert refused.headers["retry-after"] == str(11 * 3600 + 59 * 60 + 40)
        served = httpx.post(f"{url}/v1/chat", json={"message": "hi"}, headers=dev_auth(light))
        assert served.status_code == 200
        pin(stores, PINNED.replace(day=4))
        assert httpx.post(
            f"{url}/v1/chat", json={"message": "hi"}, headers=dev_auth(user)
        ).is_success
    model.assert_done()


def test_the_openai_route_refuses_in_openais_error_shape(db_url: str) -> None:
    """Over the limit under /openai/v1: 429 with Retry-After and OpenAI's error body, code
    `rate_limited`, for streamed and plain requests alike."""
    user = f"openai-{uuid.uuid4().hex[:8]}"
    model = ScriptedModel([Text("Fine.")])
    body = {"model": "offline-memory-1", "messages": [{"role": "user", "content": "hi"}]}
    with replicas(db_url, [model], user_turns_per_minute=1) as stores:
        pin(stores, PINNED)
        url = f"{stores[0][0]}/openai/v1/chat/completions"
        assert httpx.post(url, json=body, headers=dev_auth(user)).status_code == 200
        for stream in (False, True):
            refused = httpx.post(url, json={**body, "stream": stream}, headers=dev_auth(user))
            assert refused.status_code == 429
            assert refused.headers["retry-after"] == "40"
            error = refused.json()["error"]
            assert error["code"] == "rate_limited"
            assert set(error) == {"message", "type", "param", "code"}
    model.assert_done()


def test_the_evaluation_route_has_its_own_allowance(db_url: str) -> None:
    """One turn a minute for users and one for the evaluation key: a user's turn does not use
    the evaluators' allowance nor theirs the user's; each second turn is refused."""
    user = f"eval-{uuid.uuid4().hex[:8]}"
    model = ScriptedModel([Text("Fine."), Text("Fine.")])
    with replicas(db_url, [model], user_turns_per_minute=1, eval_turns_per_minute=1) as stores:
        pin(stores, PINNED)
        url = stores[0][0]
        key = {"X-Eval-Key": EVAL_KEY}
        assert httpx.post(
            f"{url}/v1/chat", json={"message": "hi"}, headers=dev_auth(user)
        ).is_success
        assert httpx.post(f"{url}/v1/eval/chat", json={"message": "hi"}, headers=key).is_success
        refusal(httpx.post(f"{url}/v1/eval/chat", json={"message": "hi"}, headers=key), "a minute")
        refusal(
            httpx.post(f"{url}/v1/chat", json={"message": "hi"}, headers=dev_auth(user)),
            "a minute",
        )
    model.assert_done()
