"""The column types per dialect: exact identity, Unicode text long enough for what the API
accepts. SQL Server cannot run here, so its DDL, its comparisons and the migration's SQL are
checked as compiled; the three servers that run are checked as they really are.
"""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import Engine, inspect, select, text
from sqlalchemy.dialects import mssql, mysql, postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.schema import CreateColumn, CreateTable

from app.db.locking import locked_memory_select
from app.db.migrate import alembic_config
from app.db.schema import agent_memory, conversation_messages, conversations, metadata
from app.db.types import Identifier

ID_COLUMNS = {
    ("agent_memory", "user_id"): 128,
    ("amem_feature_flags", "name"): 64,
    ("amem_feature_flags", "updated_by"): 128,
    ("amem_conversations", "id"): 36,
    ("amem_conversations", "user_id"): 128,
    ("amem_conversation_messages", "conversation_id"): 36,
    ("amem_conversation_messages", "turn_id"): 36,
    ("amem_conversation_messages", "superseded_by"): 36,
    ("amem_memory_changes", "id"): 36,
    ("amem_memory_changes", "user_id"): 128,
    ("amem_memory_changes", "turn_id"): 36,
    ("amem_memory_changes", "conversation_id"): 36,
    ("amem_memory_changes", "undoes"): 36,
    ("amem_memory_proposals", "id"): 36,
    ("amem_memory_proposals", "user_id"): 128,
    ("amem_memory_proposals", "turn_id"): 36,
    ("amem_memory_proposals", "conversation_id"): 36,
    ("amem_memory_preferences", "user_id"): 128,
    ("amem_limit_counters", "caller"): 128,
    ("amem_stream_slots", "lease_id"): 36,
    ("amem_stream_slots", "caller"): 128,
    ("amem_usage_daily", "user_id"): 128,
    ("amem_audit_log", "actor"): 128,
    ("amem_audit_log", "target"): 128,
    # Projects (revision 0012).
    ("amem_projects", "id"): 36,
    ("amem_projects", "user_id"): 128,
    ("amem_project_memory", "project_id"): 36,
    ("amem_project_memory", "user_id"): 128,
    ("amem_conversations", "project_id"): 36,
    ("amem_memory_changes", "project_id"): 36,
    ("amem_memory_proposals", "project_id"): 36,
    # Remember-until (revision 0017): the owner, and the document ('user', 'memory', a project).
    ("amem_memory_expiries", "user_id"): 128,
    ("amem_memory_expiries", "document"): 36,
    # Semantic search (revision 0016): the owner, and the worker's lease on a job.
    ("amem_message_embeddings", "user_id"): 128,
    ("amem_embedding_jobs", "user_id"): 128,
    ("amem_embedding_jobs", "lease_token"): 36,
    # Browser sessions (revision 0019): the cookie secret's SHA-256 (hex) and the subject.
    ("amem_web_sessions", "id_hash"): 64,
    ("amem_web_sessions", "subject"): 128,
}
# Ids that may be absent: who set a flag, a change's or proposal's turn, conversation, undo,
# and the turn that superseded a message.
NULLABLE_IDS = {
    ("amem_feature_flags", "updated_by"),
    *(
        (table, column)
        for table in ("amem_memory_changes", "amem_memory_proposals")
        for column in ("turn_id", "conversation_id")
    ),
    ("amem_memory_changes", "undoes"),
    ("amem_conversation_messages", "superseded_by"),  # NULL: part of the current transcript
    # NULL: outside projects.
    ("amem_conversations", "project_id"),
    ("amem_memory_changes", "project_id"),
    ("amem_memory_proposals", "project_id"),
    ("amem_embedding_jobs", "lease_token"),  # NULL: no worker holds the job
}


def ddl(dialect: Dialect) -> str:
    return "\n".join(
        " ".join(str(CreateTable(t).compile(dialect=dialect)).split())
        for t in metadata.sorted_tables
    )


def column_ddl(dialect: Dialect, table: str, column: str) -> str:
    """The column's type and nullability as the dialect's CREATE TABLE writes them."""
    spec = str(CreateColumn(metadata.tables[table].c[column]).compile(dialect=dialect))
    return " ".join(spec.split()[1:])


def test_every_id_column_is_an_identifier() -> None:
    """Every column holding a subject or an id uses the exact type; nothing else does."""
    found = {
        (table.name, column.name): column.type.length  # type: ignore[attr-defined]
        for table in metadata.tables.values()
        for column in table.columns
        if isinstance(column.type, Identifier)
    }
    assert found == ID_COLUMNS


@pytest.mark.parametrize(
    ("dialect", "expected"),
    [
        pytest.param(sqlite.dialect(), "VARCHAR({n}) NOT NULL", id="sqlite"),
        pytest.param(postgresql.dialect(), 'VARCHAR({n}) COLLATE "C" NOT NULL', id="postgresql"),
        pytest.param(
            mysql.dialect(is_mariadb=True),
            "VARCHAR({n}) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL",
            id="mariadb",
        ),
        pytest.param(
            mysql.dialect(),
            "VARCHAR({n}) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL",
            id="mysql",
        ),
        pytest.param(mssql.dialect(), "VARBINARY({n4}) NOT NULL", id="mssql"),
    ],
)
def test_ids_compile_to_exact_types(dialect: Dialect, expected: str) -> None:
    """SQLite's default BINARY collation, PostgreSQL's "C", the NO PAD binary collations of
    MariaDB and MySQL 8 (their `utf8mb4_bin` is PAD SPACE), SQL Server VARBINARY (its string
    comparison ignores trailing spaces under every collation, keys included)."""
    for (table, column), length in ID_COLUMNS.items():
        wanted, actual = (
            expected.format(n=length, n4=length * 4),
            column_ddl(dialect, table, column),
        )
        if (table, column) in NULLABLE_IDS:  # SQL Server spells out NULL
            wanted, actual = wanted.removesuffix(" NOT NULL"), actual.removesuffix(" NULL")
        assert actual == wanted, (table, column)


def test_sql_server_text_is_unicode_and_timestamps_precise() -> None:
    """NVARCHAR for titles, NVARCHAR(max) for documents and messages (VARCHAR/TEXT are not
    Unicode there), DATETIME2(6) for transcript times."""
    server = mssql.dialect()
    assert column_ddl(server, "agent_memory", "content") == "NVARCHAR(max) NOT NULL"
    assert column_ddl(server, "amem_conversation_messages", "content") == "NVARCHAR(max) NOT NULL"
    assert column_ddl(server, "amem_conversations", "title") == "NVARCHAR(200) NOT NULL"
    assert column_ddl(server, "amem_conversations", "created_at") == "DATETIME2(6) NOT NULL"
    assert "VARCHAR(max)" not in ddl(server).replace("NVARCHAR(max)", "")
    assert " TEXT" not in ddl(server) and "NTEXT" not in ddl(server)


def test_mariadb_messages_are_mediumtext_and_tables_utf8mb4() -> None:
    """TEXT stops at 65,535 bytes (a 32,000-emoji message is 128,000): MEDIUMTEXT; every
    table is utf8mb4 whatever the database's default."""
    for dialect in (mysql.dialect(is_mariadb=True), mysql.dialect()):
        assert column_ddl(dialect, "amem_conversation_messages", "content") == (
            "MEDIUMTEXT NOT NULL"
        )
        assert ddl(dialect).count("CHARSET=utf8mb4") == len(metadata.tables)


def test_sql_server_compares_the_utf16_bytes_trailing_spaces_included() -> None:
    """The bound value on SQL Server is the id's UTF-16LE bytes, so `alice` and `alice ` are
    different values (binary comparison pads only with 0x00, i.e. U+0000, which no id holds);
    the locked read keeps its hint."""
    server = mssql.dialect()
    query = locked_memory_select("mssql", "alice ")
    compiled = query.compile(dialect=server)
    sql = " ".join(str(compiled).split())
    assert "FROM agent_memory WITH (UPDLOCK, HOLDLOCK)" in sql
    bind = next(bind for bind in compiled.binds.values() if bind.value == "alice ")
    processor = bind.type._cached_bind_processor(server)
    assert processor is not None
    assert processor("alice ") == "alice ".encode("utf-16-le")
    assert processor("alice ") != processor("alice")
    assert processor("ALICE") != processor("alice")
    literal = select(agent_memory.c.content).where(agent_memory.c.user_id == "alice ")
    rendered = str(literal.compile(dialect=server, compile_kwargs={"literal_binds": True}))
    assert rendered.endswith("= 0x61006c006900630065002000")
    assert Identifier(128).process_result_value(b"a\x00 \x00", server) == "a "


def test_the_migration_compiles_for_sql_server(capsys: pytest.CaptureFixture[str]) -> None:
    """Offline SQL of the whole chain and of the way back: user_id becomes the UTF-16LE bytes
    of the old text under the same primary key, text becomes NVARCHAR, message ids are kept."""
    config = alembic_config("mssql+pyodbc://")
    command.upgrade(config, "base:head", sql=True)
    up = " ".join(capsys.readouterr().out.split())
    for statement in [
        "ALTER TABLE agent_memory ADD user_id_new VARBINARY(512) NULL",
        "UPDATE agent_memory SET user_id_new = CAST(CAST(user_id AS NVARCHAR(128)) AS "
        "VARBINARY(512))",
        "ALTER TABLE agent_memory DROP CONSTRAINT pk_agent_memory",
        "EXEC sp_rename 'agent_memory.user_id_new', 'user_id', 'COLUMN'",
        "ALTER TABLE agent_memory ALTER COLUMN user_id VARBINARY(512) NOT NULL",
        "ALTER TABLE agent_memory ADD CONSTRAINT pk_agent_memory PRIMARY KEY (user_id, "
        "memory_type)",
        "ALTER TABLE agent_memory ALTER COLUMN content NVARCHAR(max) NOT NULL",
        "SET IDENTITY_INSERT amem_conversation_messages ON",
        "CAST(CAST(conversation_id AS NVARCHAR(36)) AS VARBINARY(144))",
        "CREATE TABLE amem_alembic_version",
    ]:
        assert statement in up, statement
    assert "alembic_version (" not in up.replace("amem_alembic_version (", "")

    command.downgrade(config, "head:0003", sql=True)
    down = " ".join(capsys.readouterr().out.split())
    assert "ALTER TABLE agent_memory ALTER COLUMN user_id VARCHAR(128) NOT NULL" in down
    assert "CAST(CAST(user_id AS NVARCHAR(128)) AS VARCHAR(128))" in down
    assert "DROP TABLE amem_conversation_messages" in down


# -- the servers that run here -------------------------------------------------------------------


def test_live_id_columns_compare_exactly(engine: Engine) -> None:
    """On the migrated database itself, every id column has the exact collation, and the
    server agrees that `alice`, `ALICE`, `álice` and `alice ` differ from each other."""
    dialect = engine.dialect.name
    columns = {
        (table, column["name"]): column
        for table in {name for name, _ in ID_COLUMNS}
        for column in inspect(engine).get_columns(table)
    }
    if dialect in ("mysql", "mariadb"):
        with engine.connect() as connection:
            database, server = connection.execute(
                text("SELECT @@collation_database, @@collation_server")
            ).one()
        # The suite's databases take the server's default (case-insensitive, PAD SPACE on a
        # stock MariaDB): exactness has to come from the schema.
        assert database == server and not database.endswith("_bin"), database
    for key in ID_COLUMNS:
        collation = columns[key]["type"].collation  # type: ignore[attr-defined]
        if dialect == "postgresql":
            assert collation == "C", key
        elif dialect in ("mysql", "mariadb"):
            assert collation == "utf8mb4_nopad_bin", key
    with engine.begin() as connection:
        for n, subject in enumerate(["alice", "ALICE", "\u00e1lice", "a\u0301lice", "alice "]):
            connection.execute(
                conversations.insert().values(
                    id=f"00000000-0000-4000-8000-00000000000{n}",
                    user_id=subject,
                    title="t",
                    created_at=text("CURRENT_TIMESTAMP"),
                    updated_at=text("CURRENT_TIMESTAMP"),
                )
            )
        counted = (
            connection.execute(
                select(conversations.c.user_id).where(conversations.c.user_id == "alice")
            )
            .scalars()
            .all()
        )
    assert counted == ["alice"]
    assert conversation_messages.c.conversation_id.type.length == 36  # type: ignore[attr-defined]
