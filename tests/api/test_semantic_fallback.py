"""Semantic search over real HTTP on SQLite and PostgreSQL (and MariaDB, where it is never
built): an embedding endpoint that is down, slow, answers vectors of the wrong size or garbage
never fails a search or a turn: the search answers 200 with the lexical ranking, within the
query's short embedding deadline, and `amem_search_semantic_fallback_total{reason}` counts why.
The messages are embedded by the server's own worker (off the turn's path); GET /info says
whether the vectors are semantic."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import Engine, func, select

from app.db.schema import message_embeddings
from app.main import create_app
from tests.support.apps import api_settings, closed_port_url
from tests.support.databases import migrated_engine
from tests.support.embedding_servers import FaultyEndpoint, pgvector_url, vector_url
from tests.support.server import live_server
from tests.support.sse import post_chat
from tests.support.tokens import dev_auth
from tests.support.waiting import wait_for

QUERY_DEADLINE = 0.3
__all__ = ["pgvector_url", "vector_url"]  # fixtures


def fallbacks(reason: str) -> float:
    return REGISTRY.get_sample_value("amem_search_semantic_fallback_total", {"reason": reason}) or 0


def search(url: str, user: str, q: str) -> httpx.Response:
    return httpx.get(
        f"{url}/v1/conversations/search", params={"q": q}, headers=dev_auth(user), timeout=30
    )


def embedded(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(
            connection.execute(select(func.count()).select_from(message_embeddings)).scalar() or 0
        )


@pytest.fixture
def endpoint() -> Iterator[tuple[FaultyEndpoint, str]]:
    faulty = FaultyEndpoint(slow_seconds=3.0)
    with live_server(faulty.app) as url:  # type: ignore[arg-type]
        yield faulty, f"{url}/v1"


def settings(db_url: str, base_url: str, **overrides: Any) -> Any:
    return api_settings(
        db_url,
        embedding_base_url=base_url,
        embedding_model="faulty-1",
        embedding_dimensions=256,
        embedding_query_timeout_seconds=QUERY_DEADLINE,
        embedding_poll_seconds=0.05,
        **overrides,
    )


@pytest.mark.parametrize("behaviour", ["slow", "wrong_dimensions", "garbage", "error"])
def test_a_failing_endpoint_leaves_search_lexical(
    vector_url: str, endpoint: tuple[FaultyEndpoint, str], behaviour: str
) -> None:
    """Vectors made while the endpoint worked; then it misbehaves: the search answers 200 with
    the lexical hit, without waiting past the query deadline (generously bounded), the reason is
    counted; the next search does not ask the endpoint again (recent_failure)."""
    faulty, base_url = endpoint
    engine = migrated_engine(vector_url)
    expected = {
        "slow": "timeout",
        "wrong_dimensions": "invalid",
        "garbage": "invalid",
        "error": "unavailable",
    }[behaviour]
    with live_server(create_app(settings(vector_url, base_url))) as url:
        response, _events = post_chat(url, dev_auth("alice"), {"message": "zebra stripes cool"})
        assert response.status_code == 200
        wait_for(lambda: embedded(engine) == 2, "the worker to embed the turn")
        assert search(url, "alice", "zebra").status_code == 200
        faulty.behaviour = behaviour  # type: ignore[assignment]
        before, skipped = fallbacks(expected), fallbacks("recent_failure")
        started = time.monotonic()
        answer = search(url, "alice", "zebra stripes")
        elapsed = time.monotonic() - started
        again = search(url, "alice", "zebra")
    engine.dispose()
    assert answer.status_code == 200, answer.text
    assert [hit["role"] for hit in answer.json()["results"]][:1] == ["user"]
    assert elapsed < 2.5  # the slow endpoint answers after 3 s; the deadline is 0.3 s
    assert fallbacks(expected) == before + 1
    assert again.status_code == 200 and again.json()["results"]
    assert fallbacks("recent_failure") == skipped + 1


def test_an_endpoint_that_is_down_never_fails_a_turn_or_a_search(
    engine: Engine, db_url: str
) -> None:
    """Nothing listens at EMBEDDING_BASE_URL: turns stream and store as always, search answers
    200 by words, `unavailable` is counted, and the messages wait in the queue."""
    before = fallbacks("unavailable")
    with live_server(create_app(settings(db_url, f"{closed_port_url()}/v1"))) as url:
        response, events = post_chat(url, dev_auth("alice"), {"message": "zebra stripes cool"})
        found = search(url, "alice", "zebra")
    assert response.status_code == 200
    assert events[-1].event == "done"
    assert found.status_code == 200
    assert len(found.json()["results"]) == 1
    if engine.dialect.name in ("sqlite", "postgresql"):
        assert fallbacks("unavailable") == before + 1
    assert embedded(engine) == 0


def test_info_labels_offline_vectors_as_not_semantic(engine: Engine, db_url: str) -> None:
    """GET /info: `embeddings` is null when off, and the offline model's is not semantic."""
    with live_server(create_app(api_settings(db_url))) as url:
        off = httpx.get(f"{url}/info").json()["embeddings"]
    with live_server(create_app(api_settings(db_url, embedding_base_url="offline"))) as url:
        offline = httpx.get(f"{url}/info").json()["embeddings"]
    assert off is None
    if engine.dialect.name in ("mysql", "mariadb"):
        assert offline is None  # MariaDB stays lexical
    else:
        assert offline == {"model": "offline-hash-1", "semantic": False}
