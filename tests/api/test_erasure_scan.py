"""Deletion reaches every table and index, proved by scanning, over real HTTP on SQLite,
PostgreSQL and MariaDB: after erasing a person, no table and no column (FTS5's shadow tables,
PostgreSQL's tsvector, InnoDB's FULLTEXT cache and auxiliary tables included) holds any of their
content or identifiers, while another person's data is all still there; after "forget
everything", memory, history and proposals are gone and the conversations kept; after deleting
one conversation, its titles, messages and index entries are gone."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, select, update

from app.db import erasure_audit as audit
from app.db.schema import erasures, memory_proposals
from app.db.writers import maintenance
from app.main import create_app
from app.memory.rules import Operation
from app.memory.service import MemoryService
from app.runtime import erasure_key
from tests.support.apps import api_settings
from tests.support.erasure import Planted, fulltext_optimizable, plant, scan, sentinel, tail
from tests.support.server import live_server
from tests.support.tokens import dev_auth

# On MariaDB these read and set server-wide variables (tests/support/erasure.py).
pytestmark = pytest.mark.own_mariadb  # sets MariaDB globals: on a server of its own


@pytest.fixture
def url(engine: Engine, db_url: str) -> Iterator[str]:
    with fulltext_optimizable(engine), live_server(create_app(api_settings(db_url))) as served:
        yield served


def subject() -> str:
    return f"person-{uuid.uuid4().hex}"


def planted_pair(engine: Engine) -> tuple[Planted, Planted]:
    return plant(engine, subject()), plant(engine, subject())


def found_everywhere(engine: Engine, planted: Planted) -> set[str]:
    """The needles of `planted` that the scan finds (the scan's own control)."""
    return {hit.split(":")[-1] for hit in scan(engine, planted.all())}


def test_erasing_a_person_leaves_nothing_of_them_in_any_table(engine: Engine, url: str) -> None:
    """DELETE /v1/account with the caller's subject as confirmation: 204, then none of the
    person's sentinels (memory, history, proposals, titles, messages) nor identifiers (subject,
    search owner tokens, conversation, turn, change and proposal ids) is anywhere in the
    database; the other person's are all found; one audit row remains, complete, keyed by the
    keyed hash of the subject."""
    person, other = planted_pair(engine)
    assert found_everywhere(engine, person) >= set(person.all()) - {
        "fts_owner_token",
        "postgres_owner_lexeme",
    }
    # Semantic search's vectors and queued jobs name their owner: the scan reads them too.
    assert {"amem_message_embeddings:subject", "amem_embedding_jobs:subject"} <= set(
        scan(engine, {"subject": person.subject})
    )
    response = httpx.request(
        "DELETE",
        f"{url}/v1/account",
        json={"confirm": person.subject},
        headers=dev_auth(person.subject),
    )
    assert response.status_code == 204, response.text
    assert scan(engine, person.all()) == []
    assert found_everywhere(engine, other) >= set(other.all()) - {
        "fts_owner_token",
        "postgres_owner_lexeme",
    }
    if engine.dialect.name == "sqlite":  # the scan reads the index's own storage
        assert any(
            hit.startswith("amem_message_search_data:")
            for hit in scan(engine, other.kept_conversation)
        )
    digest = audit.subject_hash(erasure_key(api_settings("sqlite://")), person.subject)
    with engine.connect() as connection:
        rows = connection.execute(select(erasures)).all()
    assert [(row.subject_hash, row.completed_at is not None) for row in rows] == [(digest, True)]


def test_forgetting_memory_removes_memory_history_and_proposals_only(
    engine: Engine, url: str
) -> None:
    """DELETE /v1/memory: the memory, history and proposal sentinels and ids are nowhere; the
    person's conversations (titles, messages, index entries) are all still found."""
    person, _other = planted_pair(engine)
    response = httpx.delete(f"{url}/v1/memory", headers=dev_auth(person.subject))
    assert response.status_code == 204, response.text
    assert scan(engine, person.memory) == []
    kept = {**person.kept_conversation, **person.deleted_conversation}
    assert {hit.split(":")[-1] for hit in scan(engine, kept)} == set(kept)


def test_deleting_a_conversation_removes_its_messages_and_index_entries(
    engine: Engine, url: str
) -> None:
    """DELETE /v1/conversations/{id}: its title, messages, ids and their search index entries
    are nowhere; the person's other conversation and memory are all still found."""
    person, _other = planted_pair(engine)
    response = httpx.delete(
        f"{url}/v1/conversations/{person.conversation_id}", headers=dev_auth(person.subject)
    )
    assert response.status_code == 204, response.text
    assert scan(engine, person.deleted_conversation) == []
    kept = {**person.kept_conversation, **person.memory}
    assert {hit.split(":")[-1] for hit in scan(engine, kept)} == set(kept)


def test_on_the_embedded_database_the_erased_bytes_are_gone_from_the_files(
    db: Engine, sqlite_url: str
) -> None:
    """SQLite, below SQL: after the erasure, none of the person's sentinels is in the database
    file or its write-ahead log, byte for byte (freed pages are zeroed by secure_delete and the
    log is checkpointed and truncated), while the other person's are still in the file."""
    person, other = planted_pair(db)
    with live_server(create_app(api_settings(sqlite_url))) as url:
        response = httpx.request(
            "DELETE",
            f"{url}/v1/account",
            json={"confirm": person.subject},
            headers=dev_auth(person.subject),
        )
        assert response.status_code == 204, response.text
        path = Path(str(db.url.database))
        files = (path, path.with_name(path.name + "-wal"))
        stored = b"".join(file.read_bytes() for file in files if file.exists()).lower()
    contents = ("memory", "fact", "history_only", "proposal", "title", "question", "answer")
    assert [name for name in contents if tail(person.all()[name]).encode() in stored] == []
    assert [name for name in contents if tail(other.all()[name]).encode() not in stored] == []


def test_the_export_holds_everything_an_erasure_removes(engine: Engine, url: str) -> None:
    """GET /v1/memory/export, before erasing: every planted sentinel (memory, history of an
    entry no longer in memory, a pending and an expired proposal, titles, messages) and the
    conversation, turn, change and proposal ids are in it; none of the other person's is."""
    person, other = planted_pair(engine)
    expired = sentinel("expired")
    MemoryService(engine).commit_operations(
        person.subject,
        [[Operation(target="memory", action="add", content=f"Once {expired}")]],
        may_propose=True,
    )
    with engine.begin() as connection, maintenance(connection):  # planting the past
        connection.execute(
            update(memory_proposals)
            .where(memory_proposals.c.batches.contains(expired))
            .values(expires_at=audit.now() - timedelta(days=1))
        )
    response = httpx.get(f"{url}/v1/memory/export", headers=dev_auth(person.subject))
    assert response.status_code == 200, response.text
    exported = response.text.lower()
    needles = {**person.all(), "expired_proposal": expired}
    needles.pop("fts_owner_token")
    needles.pop("postgres_owner_lexeme")
    assert [name for name, value in needles.items() if tail(value) not in exported] == []
    assert [name for name, value in other.all().items() if tail(value) in exported] == []


def test_deleting_a_project_leaves_nothing_of_it(engine: Engine, url: str) -> None:
    """DELETE /v1/projects/{id}?conversations=delete: the project's name and id, its document,
    its history (of an entry no longer in it too), its proposal and its conversation (title,
    messages, index entries) are nowhere; the person's general memory and other conversations
    are all still found."""
    person, _other = planted_pair(engine)
    response = httpx.delete(
        f"{url}/v1/projects/{person.projects['project_id']}",
        params={"conversations": "delete"},
        headers=dev_auth(person.subject),
    )
    assert response.status_code == 204, response.text
    project = {
        **person.projects,
        **{name: value for name, value in person.memory.items() if name.startswith("project_")},
        **{
            name: value
            for name, value in person.kept_conversation.items()
            if name.startswith("project_")
        },
    }
    assert len(project) == 11
    assert scan(engine, project) == []
    kept = {
        name: value
        for name, value in {**person.memory, **person.kept_conversation}.items()
        if name not in project
    }
    assert {hit.split(":")[-1] for hit in scan(engine, kept)} == set(kept)
