"""What saving PostgreSQL round trips must not cost: a turn's memory read and a search run in
autocommit and a transcript write (with TRANSCRIPT_COMMIT=async) sends `synchronous_commit = off`
with its COMMIT, on connections that the pool hands on to memory commits. A pool of one
connection makes every step reuse the same one.

- the connection a memory read or a search used is transactional again for the next holder (a
  rolled-back write leaves nothing);
- a transcript write commits, and leaves the connection's session waiting for its WAL flush
  (the next memory commit on it is durable);
- a transcript write whose block fails commits none of its rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Engine, event, func, select, text

from app.conversations.service import ConversationService
from app.db.engine import DatabaseLimits, build_engine
from app.db.schema import agent_memory, conversations
from app.db.writers import maintenance
from app.memory.service import MemoryService
from tests.support.databases import migrated_engine, wipe

pytestmark = pytest.mark.postgres
TURN = "0" * 8 + "-0000-4000-8000-" + "0" * 12


@pytest.fixture
def one_connection(postgres_url: str) -> Iterator[Engine]:
    migrated = migrated_engine(postgres_url)
    wipe(migrated)
    migrated.dispose()
    engine = build_engine(postgres_url, DatabaseLimits(pool_size=1, pool_max_overflow=0))
    try:
        yield engine
    finally:
        engine.dispose()


def conversation_count(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(conversations)).scalar_one())


READS: dict[str, Callable[[Engine], object]] = {
    "memory read": lambda engine: MemoryService(engine).read("reader"),
    "search": lambda engine: asyncio.run(ConversationService(engine).search("reader", "word", 5)),
}


@pytest.mark.parametrize("read", READS.values(), ids=READS.keys())
def test_the_connection_a_read_used_is_transactional_again(
    one_connection: Engine, read: Callable[[Engine], object]
) -> None:
    read(one_connection)
    with one_connection.connect() as connection, maintenance(connection):
        assert connection.connection.dbapi_connection.autocommit is False  # type: ignore[union-attr]
        connection.execute(
            agent_memory.insert().values(
                user_id="reader", memory_type="memory", content="[]", schema_version=1
            )
        )
        connection.rollback()
    with one_connection.connect() as connection:
        stored = connection.execute(select(func.count()).select_from(agent_memory)).scalar_one()
    assert stored == 0


def test_a_transcript_write_commits_and_leaves_the_session_durable(
    one_connection: Engine,
) -> None:
    with one_connection.connect() as connection:
        default = connection.exec_driver_sql("SHOW synchronous_commit").scalar_one()
    assert default != "off"  # the server's own setting: what memory commits wait for
    service = ConversationService(one_connection, durable=False)
    conversation = asyncio.run(service.create("writer", TURN, "first message"))
    assert conversation is not None
    assert asyncio.run(service.append(conversation, TURN, "assistant", "an answer"))
    with one_connection.connect() as connection:
        assert connection.exec_driver_sql("SHOW synchronous_commit").scalar_one() == default
        in_transaction = connection.exec_driver_sql(
            "SELECT current_setting('synchronous_commit')"
        ).scalar_one()
        assert in_transaction == default
    assert conversation_count(one_connection) == 1
    stored = asyncio.run(service.messages("writer", conversation))
    assert stored is not None
    assert [message.content for message in stored] == ["first message", "an answer"]


def test_a_failed_transcript_write_commits_none_of_its_rows(one_connection: Engine) -> None:
    service = ConversationService(one_connection, durable=False)
    with pytest.raises(RuntimeError), service._transcript_write() as connection:
        connection.execute(
            text(
                "INSERT INTO amem_conversations (id, user_id, title, created_at, updated_at) "
                "VALUES ('c-1', 'writer', 't', now(), now())"
            )
        )
        raise RuntimeError("the block fails after its first statement")
    assert conversation_count(one_connection) == 0
    with one_connection.connect() as connection:  # and the connection is usable
        assert connection.exec_driver_sql("SELECT 1").scalar_one() == 1


def test_searches_are_never_prepared_and_other_statements_still_are(
    one_connection: Engine,
) -> None:
    """A search is planned for its own words and owner each time (PostgreSQL's generic plan of
    a prepared search reads the owner's messages one conversation at a time); the connection
    goes on preparing the statements it repeats otherwise."""
    service, memory = (
        ConversationService(one_connection, durable=False),
        MemoryService(one_connection),
    )
    for _ in range(12):
        asyncio.run(service.search("reader", "word", 5))
        memory.read("reader")
    with one_connection.connect() as connection:
        prepared = connection.exec_driver_sql("SELECT statement FROM pg_prepared_statements")
        statements = [str(row[0]) for row in prepared]
    assert not [statement for statement in statements if "search_vector" in statement]
    assert [statement for statement in statements if "agent_memory" in statement]


def test_transcript_writes_are_durable_unless_async_is_asked_for(one_connection: Engine) -> None:
    """TRANSCRIPT_COMMIT's default (durable) never turns `synchronous_commit` off: a turn whose
    `done` was received keeps its transcript across a crash or a failover to a synchronous
    standby. Only the opt-in async mode sends it."""
    sent: list[str] = []

    def record(*args: object) -> None:
        sent.append(str(args[2]))

    event.listen(one_connection, "before_cursor_execute", record)
    try:
        for service, expected in (
            (ConversationService(one_connection), False),
            (ConversationService(one_connection, durable=False), True),
        ):
            sent.clear()
            assert asyncio.run(service.create("durable", TURN, "a message")) is not None
            assert any("synchronous_commit" in statement for statement in sent) is expected
    finally:
        event.remove(one_connection, "before_cursor_execute", record)
