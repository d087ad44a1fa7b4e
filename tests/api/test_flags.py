"""The memory feature flag: operator-only, stored in the database, followed by every replica."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from app.memory.flags import read_flag
from tests.support.apps import api_settings, app_client, memory_rows
from tests.support.tokens import dev_auth

OPERATOR = dev_auth("olivia", ["operator"])
ALICE = dev_auth("alice")
ADD = {"operations": [{"target": "user", "action": "add", "content": "Prefers tea."}]}
CACHE_SECONDS = 0.3


def _memory_flag(client: TestClient) -> dict[str, object]:
    response = client.get("/v1/admin/flags", headers=OPERATOR)
    assert response.status_code == 200
    flag: dict[str, object] = response.json()["flags"]["memory"]
    return flag


def test_flag_defaults_to_memory_enabled_setting(engine: Engine, db_url: str) -> None:
    """Until an operator sets it, the flag reports MEMORY_ENABLED with source 'default'."""
    with app_client(api_settings(db_url, memory_enabled=False)) as client:
        assert _memory_flag(client) == {
            "name": "memory",
            "enabled": False,
            "source": "default",
            "updated_by": None,
        }
        assert client.post("/v1/memory/operations", headers=ALICE, json=ADD).status_code == 409


def test_operator_switches_the_flag_and_nothing_is_deleted(engine: Engine, db_url: str) -> None:
    """PUT /v1/admin/flags/memory stores the flag (with who set it); switching it off keeps
    every memory row, and switching it back on restores writes."""
    with app_client(api_settings(db_url)) as client:
        assert client.post("/v1/memory/operations", headers=ALICE, json=ADD).status_code == 200
        response = client.put("/v1/admin/flags/memory", headers=OPERATOR, json={"enabled": False})
        assert response.status_code == 200
        assert response.json() == {
            "name": "memory",
            "enabled": False,
            "source": "database",
            "updated_by": "olivia",
        }
        assert read_flag(engine, "memory", True).enabled is False
        assert memory_rows(engine, "alice") == 1
        assert client.post("/v1/memory/operations", headers=ALICE, json=ADD).status_code == 409
        assert client.get("/v1/memory", headers=ALICE).json()["user"]["entries"] == ["Prefers tea."]
        client.put("/v1/admin/flags/memory", headers=OPERATOR, json={"enabled": True})
        assert client.post("/v1/memory/operations", headers=ALICE, json=ADD).status_code == 200


@pytest.mark.parametrize(
    ("headers", "body", "status"),
    [
        ({}, {"enabled": False}, 401),
        (ALICE, {"enabled": False}, 403),
        (OPERATOR, {"enabled": "no"}, 422),
        (OPERATOR, {"enabled": 0}, 422),
        (OPERATOR, {}, 422),
        (OPERATOR, {"enabled": False, "extra": 1}, 422),
    ],
    ids=["anonymous", "not_operator", "string", "integer", "missing", "unknown_field"],
)
def test_flag_changes_are_refused_unless_valid_and_by_an_operator(
    headers: dict[str, str], body: dict[str, object], status: int, engine: Engine, db_url: str
) -> None:
    """Only an operator with a boolean body can switch the flag; refusals store nothing."""
    with app_client(api_settings(db_url)) as client:
        response = client.put("/v1/admin/flags/memory", headers=headers, json=body)
        assert response.status_code == status
        assert "error" in response.json()
    assert read_flag(engine, "memory", True).source == "default"


def test_unknown_flag_is_404(engine: Engine, db_url: str) -> None:
    """Only known flags can be set."""
    with app_client(api_settings(db_url)) as client:
        response = client.put("/v1/admin/flags/nonsense", headers=OPERATOR, json={"enabled": True})
    assert response.status_code == 404


def test_second_instance_follows_within_the_cache_window(engine: Engine, db_url: str) -> None:
    """Two app instances on one database: a change made through one is seen by the other
    once its cache window has passed (polled with a deadline, never a fixed sleep)."""
    settings = api_settings(db_url, flag_cache_seconds=CACHE_SECONDS)
    with app_client(settings) as first, app_client(settings) as second:
        assert _memory_flag(second)["enabled"] is True  # primes the second instance's cache
        first.put("/v1/admin/flags/memory", headers=OPERATOR, json={"enabled": False})
        deadline = time.monotonic() + CACHE_SECONDS + 10
        while _memory_flag(second)["enabled"] is not False:
            assert time.monotonic() < deadline, "the second instance never saw the change"
        assert second.post("/v1/memory/operations", headers=ALICE, json=ADD).status_code == 409
