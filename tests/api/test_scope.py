"""The request-bound memory scope: set from the token, private to its request, the only owner."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import Engine

from app.api.deps import CurrentUser, RuntimeDep
from app.main import create_app
from app.memory.repository import CancelCheck
from app.memory.rules import Operation, Snapshot
from app.memory.scope import NoMemoryScopeError, memory_scope, require_scope
from app.memory.service import CommitResult, MemoryService
from tests.support.apps import api_settings, served
from tests.support.tokens import dev_auth

USERS = ("alice", "bob", "carol", "dave")


def test_scope_is_absent_outside_a_request_and_restored_after() -> None:
    """Memory code outside an authenticated scope fails loudly; nested scopes restore the outer."""
    with pytest.raises(NoMemoryScopeError):
        require_scope()
    with memory_scope("alice", True):
        with memory_scope("bob", False):
            assert require_scope().user_id == "bob"
            assert require_scope().writes_enabled is False
        assert require_scope().user_id == "alice"
    with pytest.raises(NoMemoryScopeError):
        require_scope()


def _barrier_app(db_url: str, parties: int) -> FastAPI:
    """The real app plus one probe route that holds every request at a barrier mid-request."""
    app = create_app(api_settings(db_url))
    state: dict[str, asyncio.Barrier] = {}

    @app.get("/probe/scope")
    async def probe(user: CurrentUser) -> dict[str, Any]:
        before = require_scope().user_id
        barrier = state.setdefault("barrier", asyncio.Barrier(parties))
        # Every request is inside its scope at the same time before any of them continues.
        await asyncio.wait_for(barrier.wait(), timeout=20)
        await asyncio.sleep(0)  # let the others run between our two reads
        return {"subject": user.subject, "before": before, "after": require_scope().user_id}

    return app


async def test_concurrent_requests_never_see_each_others_scope(engine: Engine, db_url: str) -> None:
    """Four requests for four users, interleaved at a barrier inside the server, each see only
    their own subject before and after the others ran."""
    app = _barrier_app(db_url, len(USERS))
    with served(api_settings(db_url), app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            responses = await asyncio.gather(
                *(client.get("/probe/scope", headers=dev_auth(user)) for user in USERS)
            )
    for user, response in zip(USERS, responses, strict=True):
        assert response.status_code == 200, response.text
        assert response.json() == {"subject": user, "before": user, "after": user}


class RecordingMemoryService(MemoryService):
    """The real service (real database), recording which owner each call named."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.owners: list[tuple[str, str]] = []

    def read(self, user_id: str) -> Snapshot:
        self.owners.append(("read", user_id))
        return super().read(user_id)

    def commit_operations(
        self,
        user_id: str,
        batches: Sequence[Sequence[Operation]],
        should_cancel: CancelCheck = lambda: False,
        **kwargs: Any,
    ) -> CommitResult:
        self.owners.append(("commit", user_id))
        return super().commit_operations(user_id, batches, should_cancel, **kwargs)

    def forget(self, user_id: str) -> int:
        self.owners.append(("forget", user_id))
        return super().forget(user_id)


async def test_memory_service_only_sees_the_token_subject(engine: Engine, db_url: str) -> None:
    """Concurrent memory API calls for several users reach the service only with each
    request's verified subject, whatever the body says."""
    app = create_app(api_settings(db_url))
    recorder: dict[str, RecordingMemoryService] = {}

    @app.get("/probe/install")
    async def install(runtime: RuntimeDep) -> dict[str, str]:
        recorder["service"] = runtime.memory = RecordingMemoryService(runtime.engine)
        return {}

    body = {"operations": [{"target": "user", "action": "add", "content": "A fact."}]}
    with served(api_settings(db_url), app) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            await client.get("/probe/install")

            async def session(user: str) -> list[int]:
                headers = dev_auth(user)
                return [
                    (
                        await client.post(
                            "/v1/memory/operations",
                            headers=headers,
                            json={**body, "user_id": "mallory"},
                        )
                    ).status_code,
                    (
                        await client.post("/v1/memory/operations", headers=headers, json=body)
                    ).status_code,
                    (await client.get("/v1/memory", headers=headers)).status_code,
                    (await client.delete("/v1/memory", headers=headers)).status_code,
                ]

            results = await asyncio.gather(*(session(user) for user in USERS))
    assert results == [[422, 200, 200, 204]] * len(USERS)
    owners = recorder["service"].owners
    assert {owner for _kind, owner in owners} == set(USERS)
    for user in USERS:
        assert sorted(kind for kind, owner in owners if owner == user) == [
            "commit",
            "forget",
            "read",
        ]
