"""Retention on SQLite, PostgreSQL and MariaDB: `python -m app purge` deletes conversations
inactive past RETENTION_CONVERSATION_DAYS and history entries older than RETENTION_HISTORY_DAYS,
nothing when they are 0 (the default), in batches, idempotently, safely from several processes
at once, and without touching a turn that is running meanwhile."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, func, select, update

from app.conversations import repository as transcripts
from app.conversations.service import ConversationService
from app.db import erasure_audit as audit
from app.db.schema import conversations, memory_changes
from app.db.writers import maintenance
from app.erasure.retention import PurgeReport, RetentionPolicy, purge
from app.main import create_app
from app.memory.service import MemoryService
from tests.api.test_cli import run_cli
from tests.support.apps import api_settings
from tests.support.erasure import fulltext_optimizable, scan, sentinel
from tests.support.gates import Gates
from tests.support.memory_db import add
from tests.support.scripted import HeldText, ScriptedModel, memory_call
from tests.support.server import live_server
from tests.support.sse import Event, first, iter_events
from tests.support.tokens import dev_auth
from tests.support.waiting import wait_for

# On MariaDB these read and set server-wide variables (tests/support/erasure.py).
pytestmark = pytest.mark.own_mariadb  # sets MariaDB globals: on a server of its own

NOW = audit.now()


def old_conversation(engine: Engine, user: str, days: int) -> tuple[str, str]:
    """A conversation (and its message, holding a sentinel) last active `days` ago."""
    conversation_id, word = str(uuid.uuid4()), sentinel("old")
    stamp = NOW - timedelta(days=days)
    with engine.begin() as connection:
        transcripts.create(connection, conversation_id, user, "Old", stamp=stamp)
        transcripts.add_message(
            connection,
            conversation_id,
            str(uuid.uuid4()),
            "user",
            f"say {word}",
            "complete",
            stamp=stamp,
        )
    return conversation_id, word


def history_entry(engine: Engine, user: str, days: int) -> str:
    """One committed change whose history entry was created `days` ago."""
    result = MemoryService(engine).commit_operations(user, add("memory", sentinel("fact")))
    assert result.change_id is not None
    with engine.begin() as connection, maintenance(connection):  # planting the past
        connection.execute(
            update(memory_changes)
            .where(memory_changes.c.id == result.change_id)
            .values(created_at=NOW - timedelta(days=days))
        )
    return result.change_id


def counts(engine: Engine) -> tuple[int, int]:
    with engine.connect() as connection:
        return (
            int(connection.execute(select(func.count()).select_from(conversations)).scalar_one()),
            int(connection.execute(select(func.count()).select_from(memory_changes)).scalar_one()),
        )


def run(engine: Engine, policy: RetentionPolicy) -> PurgeReport:
    return purge(engine, MemoryService(engine), ConversationService(engine), policy, at=NOW)


def plant_ages(engine: Engine) -> list[str]:
    """Five conversations and five history entries 40 days old, one of each 5 days old, over
    two users; returns the old conversations' sentinels."""
    words = []
    for index in range(5):
        user = f"user-{index % 2}"
        words.append(old_conversation(engine, user, 40)[1])
        history_entry(engine, user, 40)
    old_conversation(engine, "user-0", 5)
    history_entry(engine, "user-0", 5)
    return words


@pytest.mark.parametrize(
    ("policy", "removed", "left"),
    [
        pytest.param(RetentionPolicy(), (0, 0), (6, 6), id="off-by-default"),
        pytest.param(RetentionPolicy(conversation_days=30), (5, 0), (1, 6), id="conversations"),
        pytest.param(RetentionPolicy(history_days=30), (0, 5), (6, 1), id="history"),
        pytest.param(RetentionPolicy(30, 30, batch_size=2), (5, 5), (1, 1), id="small-batches"),
        pytest.param(RetentionPolicy(3, 3), (6, 6), (0, 0), id="everything-past"),
    ],
)
def test_purge_removes_exactly_what_is_past_its_cutoff_and_is_idempotent(
    engine: Engine,
    policy: RetentionPolicy,
    removed: tuple[int, int],
    left: tuple[int, int],
) -> None:
    """What is older than the cutoff goes (in batches of any size), what is newer stays; 0
    keeps everything; a second run removes nothing more; the expired messages' words leave the
    search index too."""
    words = plant_ages(engine)
    with fulltext_optimizable(engine):
        report = run(engine, policy)
        assert (report.conversations, report.history_entries) == removed
        assert counts(engine) == left
        again = run(engine, policy)
    assert (again.conversations, again.history_entries) == (0, 0)
    assert counts(engine) == left
    if policy.conversation_days:
        assert scan(engine, {str(i): word for i, word in enumerate(words)}) == []


def test_purges_on_every_replica_at_once_remove_each_row_once(engine: Engine) -> None:
    """Three purges started together (three threads, as cron on three replicas) end with the
    same result as one, without an error, and their counts add up to what was there."""
    plant_ages(engine)
    policy = RetentionPolicy(30, 30, batch_size=2)
    reports: list[PurgeReport] = []
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def one() -> None:
        start.wait()
        try:
            reports.append(run(engine, policy))
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert sum(r.conversations for r in reports) == 5
    assert sum(r.history_entries for r in reports) == 5
    assert counts(engine) == (1, 1)


def test_a_turn_running_in_an_old_conversation_is_unaffected(engine: Engine, db_url: str) -> None:
    """A turn continues a conversation inactive for 40 days and is held before its commit; a
    purge with a 30-day retention runs meanwhile: the turn's own message made the conversation
    active, so it is kept, and the turn then commits its memory and ends `done`."""
    gates = Gates()
    user = f"retention-{uuid.uuid4().hex[:8]}"
    conversation_id, _word = old_conversation(engine, user, 40)
    fact = {"target": "user", "action": "add", "content": "Prefers tea."}
    model = ScriptedModel([memory_call(fact), HeldText("Noted.", gates, "answer")])
    events: list[Event] = []
    with live_server(create_app(api_settings(db_url), model_transport=model.transport())) as url:

        def turn() -> None:
            body = {"message": "more", "conversation_id": conversation_id}
            with (
                httpx.Client(base_url=url, timeout=60) as client,
                client.stream("POST", "/v1/chat", json=body, headers=dev_auth(user)) as response,
            ):
                events.extend(iter_events(response))

        running = threading.Thread(target=turn)
        running.start()
        wait_for(lambda: "answer" in gates.held, "the turn held before its commit")
        report = run(engine, RetentionPolicy(conversation_days=30))
        gates.release("answer")
        running.join(timeout=60)
    assert report.conversations == 0
    assert first(events, "memory").data["outcome"] == "committed"
    assert events[-1].event == "done"
    assert counts(engine)[0] == 1


def test_the_purge_command_prints_what_it_removed(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """`python -m app purge` with the retention settings: counts only, then nothing the second
    time."""
    plant_ages(engine)
    settings = {"DATABASE_URL": db_url, "RETENTION_CONVERSATION_DAYS": "30"}
    first_run = run_cli(tmp_path, "purge", **settings, RETENTION_HISTORY_DAYS="30")
    assert first_run.returncode == 0, first_run.stderr
    assert "conversations: 5" in first_run.stdout and "history entries: 5" in first_run.stdout
    second_run = run_cli(tmp_path, "purge", **settings)
    assert second_run.returncode == 0, second_run.stderr
    assert "conversations: 0" in second_run.stdout and "history entries: 0" in second_run.stdout
