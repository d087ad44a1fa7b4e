"""Revision 0006 on SQLite, PostgreSQL and MariaDB: it indexes the messages stored before it,
and its downgrade removes exactly the search objects, keeping every message."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import Engine, func, inspect, select

from app.conversations.service import ConversationService
from app.db.migrate import upgrade
from app.db.schema import SEARCH_FTS_TABLE, SEARCH_INDEX, SEARCH_VECTOR_COLUMN
from app.db.schema import conversation_messages as messages
from tests.support.databases import migrate

BEFORE = "0005"  # the revision 0006 follows
TURN = "0f8fad5b-d9cb-469f-a165-70867728950e"


@pytest.fixture
def fresh(fresh_engine: Engine) -> Engine:
    return fresh_engine


def search_objects(engine: Engine) -> set[str]:
    inspector = inspect(engine)
    names = {name for name in inspector.get_table_names() if name.startswith(SEARCH_FTS_TABLE)}
    names |= {column["name"] for column in inspector.get_columns(messages.name)}
    names |= {str(index["name"]) for index in inspector.get_indexes(messages.name)}
    return names & ({SEARCH_FTS_TABLE, SEARCH_VECTOR_COLUMN, SEARCH_INDEX})


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
