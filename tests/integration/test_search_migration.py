"""Revisions 0006 and 0007 on SQLite, PostgreSQL and MariaDB: they index the messages stored
before them, and their downgrades remove exactly the search objects, keeping every message."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import Engine, func, inspect, select

from app.conversations.service import ConversationService
from app.db.migrate import upgrade
from app.db.schema import (
    SEARCH_BUCKET_COLUMN,
    SEARCH_BUCKETS,
    SEARCH_VECTOR_COLUMN,
    is_search_object,
    postgres_bucket_index,
)
from app.db.schema import conversation_messages as messages
from tests.support.databases import migrate

BEFORE = "0005"  # the revision 0006 follows
TURN = "0f8fad5b-d9cb-469f-a165-70867728950e"


@pytest.fixture
def fresh(fresh_engine: Engine) -> Engine:
    return fresh_engine


def search_objects(engine: Engine) -> set[str]:
    inspector = inspect(engine)
    names = set(inspector.get_table_names())
    names |= {column["name"] for column in inspector.get_columns(messages.name)}
    names |= {str(index["name"]) for index in inspector.get_indexes(messages.name)}
    return {name for name in names if is_search_object(name)}


def found(engine: Engine, query: str) -> int:
    return len(asyncio.run(ConversationService(engine).search("alice", query, 10)))


def test_messages_stored_before_the_revision_are_indexed(fresh: Engine) -> None:
    migrate(fresh, BEFORE)
    service = ConversationService(fresh)
    conversation = asyncio.run(service.create("alice", TURN, "the narwhal migration plan"))
    assert conversation is not None
    upgrade(fresh)
    assert found(fresh, "narwhal") == 1
    assert search_objects(fresh)


def test_the_downgrade_removes_the_index_and_keeps_the_messages(fresh: Engine) -> None:
    upgrade(fresh)
    service = ConversationService(fresh)
    assert asyncio.run(service.create("alice", TURN, "the okapi notes")) is not None
    migrate(fresh, BEFORE, down=True)
    assert search_objects(fresh) == set()
    with fresh.connect() as connection:
        assert connection.execute(select(func.count()).select_from(messages)).scalar_one() == 1
    upgrade(fresh)
    assert found(fresh, "okapi") == 1


def test_messages_stored_before_the_owner_buckets_are_found_after_them(fresh: Engine) -> None:
    """Revision 0007 (PostgreSQL's per-bucket indexes; nothing elsewhere) backfills the bucket
    of every message stored under 0006."""
    migrate(fresh, "0006")
    service = ConversationService(fresh)
    users = [f"user-{n}" for n in range(40)]  # every one of the 16 buckets, most of them twice
    for user in users:
        assert asyncio.run(service.create(user, TURN, f"the quokka notes of {user}")) is not None
    upgrade(fresh)
    for user in users:
        hits = asyncio.run(service.search(user, "quokka", 10))
        assert [hit.snippet for hit in hits] == [f"the «quokka» notes of {user}"]
    if fresh.dialect.name == "postgresql":
        expected = {postgres_bucket_index(bucket) for bucket in range(SEARCH_BUCKETS)}
        assert search_objects(fresh) == expected | {SEARCH_VECTOR_COLUMN, SEARCH_BUCKET_COLUMN}
