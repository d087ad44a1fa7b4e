"""No request pays a worker-thread hop for FastAPI's plumbing: FastAPI runs a plain `def`
endpoint or dependency in anyio's worker threads, so every one of ours is `async def`, and a
turn, a memory read and a conversation list call `anyio.to_thread.run_sync` not once (the
service's own database work has its own workers, app/concurrency.py)."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.support.apps import api_settings
from tests.support.tokens import dev_auth


def test_requests_solve_their_dependencies_on_the_event_loop(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hops: list[str] = []
    original = anyio.to_thread.run_sync

    async def counting(function: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(function, "__qualname__", repr(function)))
        return await original(function, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counting)
    settings = api_settings(sqlite_url, eval_api_key="eval-key-for-the-hop-test")
    with TestClient(create_app(settings)) as client:
        headers = dev_auth("no-hops")
        hops.clear()  # the lifespan may use them
        assert client.post("/v1/chat", json={"message": "hi"}, headers=headers).is_success
        assert client.get("/v1/memory", headers=headers).is_success
        assert client.get("/v1/conversations", headers=headers).is_success
        evaluation = {"X-Eval-Key": "eval-key-for-the-hop-test"}
        assert client.post("/v1/eval/chat", json={"message": "hi"}, headers=evaluation).is_success
        during_requests = list(hops)  # the shutdown (the lifespan's) may use them
    assert during_requests == []
