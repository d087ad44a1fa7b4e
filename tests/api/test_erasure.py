"""Erasing a person over real HTTP and the command line, on SQLite, PostgreSQL and MariaDB: only
the caller's own typed subject erases them; the operator paths erase anyone; a turn running when
the erasure starts writes nothing afterwards; an erasure cut halfway is finished by running it
again; every column that holds a subject is covered by an erasure step."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Column, Engine, Integer, MetaData, Table, func, insert, select

from app.conversations.service import ConversationService
from app.db.schema import (
    SUBJECT_CHARS,
    agent_memory,
    conversation_messages,
    conversations,
    erasures,
    feature_flags,
    metadata,
)
from app.db.types import Identifier
from app.db.writers import MEMORY_STATE_TABLES
from app.erasure.registry import SUBJECT_COLUMNS, SubjectColumn, register
from app.erasure.retention import RetentionPolicy, purge
from app.erasure.service import ErasureService
from app.main import create_app
from app.memory.flags import write_flag
from app.memory.service import MemoryService
from tests.api.test_cli import run_cli
from tests.support.apps import api_settings, memory_rows
from tests.support.erasure import fulltext_optimizable, plant, scan, sentinel
from tests.support.gates import Gates
from tests.support.scripted import HeldText, ScriptedModel, memory_call
from tests.support.server import live_server
from tests.support.sse import Event, first, iter_events
from tests.support.tokens import TEST_DEV_SECRET, dev_auth
from tests.support.waiting import wait_for

# On MariaDB these read and set server-wide variables (tests/support/erasure.py).
pytestmark = pytest.mark.own_mariadb  # sets MariaDB globals: on a server of its own


def subject() -> str:
    return f"person-{uuid.uuid4().hex}"


def count(engine: Engine, table: Any, **where: str) -> int:
    query = select(func.count()).select_from(table)
    for column, value in where.items():
        query = query.where(table.c[column] == value)
    with engine.connect() as connection:
        return int(connection.execute(query).scalar_one())


def rows_about(engine: Engine, person: str) -> dict[str, int]:
    return {
        "memory": memory_rows(engine, person),
        "conversations": count(engine, conversations, user_id=person),
        "flags": count(engine, feature_flags, updated_by=person),
    }


NOTHING = {"memory": 0, "conversations": 0, "flags": 0}


def delete_account(url: str, person: str, body: Any) -> httpx.Response:
    return httpx.request("DELETE", f"{url}/v1/account", json=body, headers=dev_auth(person))


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        pytest.param({"confirm": "someone-else"}, 422, "confirmation_mismatch", id="other"),
        pytest.param({"confirm": ""}, 422, "confirmation_mismatch", id="empty"),
        pytest.param({}, 422, None, id="missing"),
        pytest.param({"confirm": "X", "extra": 1}, 422, None, id="extra-field"),
    ],
)
def test_the_account_is_erased_only_with_the_callers_own_subject(
    engine: Engine, db_url: str, body: dict[str, Any], status: int, code: str | None
) -> None:
    """Any other confirmation is refused and nothing is erased; the caller's exact subject (the
    control, in the same test) erases them."""
    person = subject()
    plant(engine, person)
    with live_server(create_app(api_settings(db_url))) as url:
        refused = delete_account(url, person, body)
        assert refused.status_code == status, refused.text
        if code is not None:
            assert refused.json()["error"]["code"] == code
        assert rows_about(engine, person)["memory"] == 2
        assert delete_account(url, person, {"confirm": person}).status_code == 204
    assert rows_about(engine, person) == NOTHING


def test_an_operator_erases_a_user_and_a_user_cannot(engine: Engine, db_url: str) -> None:
    """DELETE /v1/admin/users/{subject}: 403 without the operator role (nothing erased), 204
    with it; the operator's own name leaves the flag it set when the operator is erased; a
    subject with nothing stored answers 204 too."""
    person, operator = subject(), subject()
    plant(engine, person)
    write_flag(engine, "memory", True, updated_by=operator)
    with live_server(create_app(api_settings(db_url))) as url:
        path = f"{url}/v1/admin/users/{person}"
        assert httpx.delete(path, headers=dev_auth(person)).status_code == 403
        assert rows_about(engine, person)["memory"] == 2
        admin = dev_auth(operator, roles=["operator"])
        assert httpx.delete(path, headers=admin).status_code == 204
        assert httpx.delete(f"{url}/v1/admin/users/{operator}", headers=admin).status_code == 204
        assert httpx.delete(f"{url}/v1/admin/users/nobody", headers=admin).status_code == 204
    assert rows_about(engine, person) == NOTHING
    assert rows_about(engine, operator) == NOTHING
    assert count(engine, feature_flags) == 1  # the flag stays, without the operator's name


def test_the_command_line_erases_a_user(engine: Engine, db_url: str, tmp_path: Path) -> None:
    """`python -m app users erase SUBJECT` erases every row about them, prints counts only,
    and leaves the other user alone."""
    person, other = plant(engine, subject()), plant(engine, subject())
    with fulltext_optimizable(engine):
        result = run_cli(
            tmp_path,
            "users",
            "erase",
            person.subject,
            DATABASE_URL=db_url,
            AUTH_DEV_SECRET=TEST_DEV_SECRET,
        )
    assert result.returncode == 0, result.stderr
    # Both documents and the planted project's; the two conversations and the project's one.
    assert "memory documents: 3, conversations: 3" in result.stdout
    assert person.subject not in result.stdout
    assert scan(engine, person.all()) == []
    assert rows_about(engine, other.subject)["conversations"] == 3


def chat(url: str, person: str, message: str) -> list[Event]:
    with (
        httpx.Client(base_url=url, timeout=60) as client,
        client.stream(
            "POST", "/v1/chat", json={"message": message}, headers=dev_auth(person)
        ) as response,
    ):
        return list(iter_events(response))


FACT_WORD = sentinel("fact")
FACT = {"target": "user", "action": "add", "content": f"Remember {FACT_WORD}."}


def test_a_turn_running_when_the_erasure_starts_writes_nothing_afterwards(
    engine: Engine, db_url: str
) -> None:
    """The model stages a fact and its answer is held before the commit; the person erases
    their account meanwhile (204); the answer is then released: the turn's commit finds the
    erasure newer than the turn's start and writes nothing (`memory` event `failed`, reason
    `erased`), its transcript row finds no conversation, and nothing about the person is
    stored. The control turn, after the erasure, commits as usual."""
    gates = Gates()
    person = subject()
    model = ScriptedModel(
        [
            memory_call(FACT),
            HeldText("Noted.", gates, "answer"),
            memory_call(FACT, call_id="call_2"),
            HeldText("Noted again.", gates, "later"),
        ]
    )
    gates.release("later")
    events: list[Event] = []
    app = create_app(api_settings(db_url), model_transport=model.transport())
    with live_server(app) as url:
        running = threading.Thread(target=lambda: events.extend(chat(url, person, "hi")))
        running.start()
        wait_for(lambda: "answer" in gates.held, "the turn held before its commit")
        assert count(engine, conversations, user_id=person) == 1
        assert delete_account(url, person, {"confirm": person}).status_code == 204
        gates.release("answer")
        running.join(timeout=60)
        assert not running.is_alive()
        assert first(events, "memory").data["outcome"] == "failed"
        assert first(events, "memory").data["reason"] == "erased"
        assert rows_about(engine, person) == NOTHING
        assert count(engine, conversation_messages) == 0
        assert scan(engine, {"fact": FACT_WORD, "subject": person}) == []

        after = chat(url, person, "again")
        assert first(after, "memory").data["outcome"] == "committed"
    model.assert_done()


def test_an_erasure_cut_halfway_is_finished_by_running_it_again(engine: Engine) -> None:
    """A failure after the first step (memory state and the audit row) leaves the audit row
    unfinished (purge reports it), memory gone and the conversations still there; running the
    erasure again removes them and completes the row: one row, no duplicate."""
    person = plant(engine, subject())
    memory = MemoryService(engine)

    class Failing(ConversationService):
        def erase(self, user_id: str) -> int:
            raise RuntimeError("the database went away")

    with pytest.raises(RuntimeError):
        ErasureService(engine, memory, Failing(engine)).erase(person.subject)
    with engine.connect() as connection:
        assert [row.completed_at for row in connection.execute(select(erasures))] == [None]
    assert rows_about(engine, person.subject) == {**NOTHING, "conversations": 3}
    conversations_ = ConversationService(engine)
    assert purge(engine, memory, conversations_, RetentionPolicy()).unfinished_erasures == 1
    with fulltext_optimizable(engine):
        ErasureService(engine, memory, conversations_).erase(person.subject)
    assert purge(engine, memory, conversations_, RetentionPolicy()).unfinished_erasures == 0
    with engine.connect() as connection:
        assert [row.completed_at is not None for row in connection.execute(select(erasures))] == [
            True
        ]
    assert scan(engine, person.all()) == []


def test_every_column_that_holds_a_subject_is_erased_by_some_step() -> None:
    """Structural: each subject-sized identifier column of the schema is a memory-state owner
    (erased under the writer lock), the transcripts' owner, or in the registry. A table added
    later with a subject column and no registry entry fails here."""
    covered = {f"{table.name}.user_id" for table in MEMORY_STATE_TABLES}
    covered.add(f"{conversations.name}.user_id")
    covered.update(entry.name for entry in SUBJECT_COLUMNS)
    holders = {
        f"{table.name}.{column.name}"
        for table in metadata.sorted_tables
        for column in table.columns
        if isinstance(column.type, Identifier) and column.type.length == SUBJECT_CHARS
    }
    assert holders - covered == set()
    assert agent_memory.name in {name.split(".")[0] for name in holders}  # the check sees them


def test_a_table_added_to_the_registry_is_erased(engine: Engine) -> None:
    """The extension point for tables keyed by subject (usage, limits): a table registered with
    `register` loses the subject's rows in the erasure and keeps everyone else's."""
    usage = Table(
        f"amem_test_usage_{uuid.uuid4().hex[:8]}",
        MetaData(),
        Column("subject", Identifier(SUBJECT_CHARS), nullable=False),
        Column("tokens", Integer, nullable=False),
    )
    usage.create(engine)
    entry = SubjectColumn(usage, "subject")
    try:
        person, other = subject(), subject()
        with engine.begin() as connection:
            connection.execute(
                insert(usage), [{"subject": person, "tokens": 5}, {"subject": other, "tokens": 7}]
            )
        register(entry)
        memory = MemoryService(engine)
        report = ErasureService(engine, memory, ConversationService(engine)).erase(person)
        assert report.others[entry.name] == 1
        with engine.connect() as connection:
            assert connection.execute(select(usage.c.subject)).scalars().all() == [other]
    finally:
        if entry in SUBJECT_COLUMNS:
            SUBJECT_COLUMNS.remove(entry)
        usage.drop(engine)
