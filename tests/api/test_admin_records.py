"""The operator's records over real HTTP on every database: usage per day and user after real
turns, the audit log of flag switches (API and command line), operator role required, no
content in either."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
from sqlalchemy import Engine

from app.operators import usage
from tests.api.test_cli import run_cli
from tests.support.apps import api_settings, served
from tests.support.sse import post_chat
from tests.support.tokens import dev_auth

SECRET_WORDS = "my-private-words-ql9"


def test_usage_lists_the_days_totals_and_users_after_real_turns(
    engine: Engine, db_url: str
) -> None:
    """Two users' turns (and one turn on the OpenAI-compatible route, which keeps no
    transcript) record the model's reported tokens per user and day; the operator sees the
    day's totals, the heaviest user first, or one user's; other users get 403; no content."""
    ada, bob = f"ada-{uuid.uuid4().hex[:6]}", f"bob-{uuid.uuid4().hex[:6]}"
    with served(api_settings(db_url)) as url:
        for user, turns in ((ada, 2), (bob, 1)):
            for _ in range(turns):
                response, events = post_chat(url, dev_auth(user), {"message": SECRET_WORDS})
                assert events[-1].event == "done", events
        completion = httpx.post(
            f"{url}/openai/v1/chat/completions",
            json={"model": "offline-memory-1", "messages": [{"role": "user", "content": "hi"}]},
            headers=dev_auth(bob),
        )
        assert completion.status_code == 200
        day = datetime.now(UTC).date().isoformat()
        operator = dev_auth("ops", roles=["operator"])
        listed = httpx.get(f"{url}/v1/admin/usage", params={"day": day}, headers=operator)
        one = httpx.get(
            f"{url}/v1/admin/usage", params={"day": day, "subject": ada}, headers=operator
        )
        forbidden = httpx.get(f"{url}/v1/admin/usage", params={"day": day}, headers=dev_auth(ada))
        bad_day = httpx.get(f"{url}/v1/admin/usage", params={"day": "yesterday"}, headers=operator)
    assert forbidden.status_code == 403
    assert bad_day.status_code == 422
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert body["total"]["turns"] == 4 and body["total"]["users"] == 2
    assert {row["subject"]: row["turns"] for row in body["users"]} == {ada: 2, bob: 2}
    assert all(row["prompt_tokens"] > 0 and row["completion_tokens"] > 0 for row in body["users"])
    assert body["total"]["prompt_tokens"] == sum(row["prompt_tokens"] for row in body["users"])
    assert one.json()["users"] == [row for row in body["users"] if row["subject"] == ada]
    assert SECRET_WORDS not in listed.text
    with engine.connect() as connection:
        assert sum(row.turns for row in usage.for_subject(connection, ada)) == 2


def test_flag_switches_are_listed_newest_first_with_pages_and_on_the_command_line(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """Three switches through the API: the audit log lists who switched, from what to what,
    newest first, in pages; `python -m app audit` prints the same entries; non-operators 403."""
    operator = dev_auth("ops-ann", roles=["operator"])
    with served(api_settings(db_url)) as url:
        for enabled in (False, True, False):
            switched = httpx.put(
                f"{url}/v1/admin/flags/memory", json={"enabled": enabled}, headers=operator
            )
            assert switched.status_code == 200
        first = httpx.get(f"{url}/v1/admin/audit", params={"limit": 2}, headers=operator).json()
        second = httpx.get(
            f"{url}/v1/admin/audit", params={"limit": 2, "before": first["next"]}, headers=operator
        ).json()
        forbidden = httpx.get(f"{url}/v1/admin/audit", headers=dev_auth("ann"))
    assert forbidden.status_code == 403
    entries = first["entries"] + second["entries"]
    switches = [entry for entry in entries if entry["action"] == "flag.set"]
    assert [(entry["before"], entry["after"]) for entry in switches[:3]] == [
        ({"enabled": True}, {"enabled": False}),
        ({"enabled": False}, {"enabled": True}),
        (None, {"enabled": False}),  # never stored before: MEMORY_ENABLED was in force
    ]
    assert {entry["actor"] for entry in switches[:3]} == {"ops-ann"}
    assert all(entry["created_at"].endswith(("Z", "+00:00")) for entry in entries)
    if db_url.startswith("sqlite"):  # the command line reads the same rows (one dialect)
        printed = run_cli_on(db_url, tmp_path)
        assert [line["id"] for line in printed[:3]] == [int(e["id"]) for e in switches[:3]]


def run_cli_on(db_url: str, workdir: Path) -> list[dict[str, object]]:
    result = run_cli(workdir, "audit", "--limit", "3", DATABASE_URL=db_url)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]
