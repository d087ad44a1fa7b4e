"""Conversation search: a full-text index over amem_conversation_messages, one per dialect,
built from the messages already stored (app/conversations/search.py queries it).

- SQLite: the FTS5 table amem_message_search with two columns, the message's words (folded by
  unicode61 without diacritics, prefix indexes of 2 and 3 characters) and its owner's token
  (`u` and the hex of the owner's id), so that a search intersects the owner's rows with the
  words' inside the index. Its external content is the view amem_message_search_source; insert,
  update and delete triggers keep it in sync, and it is rebuilt from the stored messages.
- PostgreSQL: a column `search_vector`, set by a trigger on insert and update and backfilled
  here: the words (to_tsvector in SEARCH_POSTGRES_CONFIG, `simple` by default: no language's
  stemming or stopwords) and the owner's lexeme (`u` and the md5 of the owner's id), with a GIN
  index on it, so a search intersects the owner's rows with the words' in the index. Changing
  the setting later means running this revision again (downgrade to 0005, upgrade).
- MariaDB/MySQL: an InnoDB FULLTEXT index on `content` (built by copying the table).
- SQL Server: nothing (search there is LIKE over the caller's messages).

The downgrade removes exactly these objects; the messages are untouched either way.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import os
import re

from alembic import op

from app.db.schema import (
    OWNER_TOKEN_SQL,
    POSTGRES_OWNER_SQL,
    SEARCH_FTS_TABLE,
    SEARCH_INDEX,
    SEARCH_VECTOR_COLUMN,
)

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

MESSAGES = "amem_conversation_messages"
CONVERSATIONS = "amem_conversations"
FULLTEXT_INDEX = SEARCH_INDEX
SOURCE = f"{SEARCH_FTS_TABLE}_source"  # the FTS5 table's content: each message and its owner


def owner_of(conversation: str) -> str:
    return f"(SELECT {OWNER_TOKEN_SQL} FROM {CONVERSATIONS} WHERE id = {conversation})"


def fts_row(prefix: str, message: str) -> str:
    return f"{prefix}{message}.id, {message}.content, {owner_of(message + '.conversation_id')}"


DELETE = "'delete', "  # FTS5's delete command, with the values the row was indexed with
TRIGGERS = {
    "ai": f"AFTER INSERT ON {MESSAGES} BEGIN "
    f"INSERT INTO {SEARCH_FTS_TABLE}(rowid, content, owner) VALUES ({fts_row('', 'new')}); END",
    "ad": f"AFTER DELETE ON {MESSAGES} BEGIN "
    f"INSERT INTO {SEARCH_FTS_TABLE}({SEARCH_FTS_TABLE}, rowid, content, owner) "
    f"VALUES ({fts_row(DELETE, 'old')}); END",
    "au": f"AFTER UPDATE OF content ON {MESSAGES} BEGIN "
    f"INSERT INTO {SEARCH_FTS_TABLE}({SEARCH_FTS_TABLE}, rowid, content, owner) "
    f"VALUES ({fts_row(DELETE, 'old')}); "
    f"INSERT INTO {SEARCH_FTS_TABLE}(rowid, content, owner) VALUES ({fts_row('', 'new')}); END",
    # A conversation's messages leave the index while it still names their owner (a cascade
    # would delete them after it, when the owner can no longer be read).
    "cd": f"BEFORE DELETE ON {CONVERSATIONS} BEGIN "
    f"DELETE FROM {MESSAGES} WHERE conversation_id = old.id; END",
}


def postgres_config() -> str:
    """The text search configuration (an identifier: it is spelled into the DDL)."""
    name = os.environ.get("SEARCH_POSTGRES_CONFIG", "simple").strip() or "simple"
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
        raise RuntimeError(f"SEARCH_POSTGRES_CONFIG must be a configuration name, not {name!r}")
    return name


VECTOR_FUNCTION = f"{SEARCH_FTS_TABLE}_vector"


def postgres_vector(content: str, owner: str) -> str:
    """The message's words in the configured configuration, plus its owner's lexeme."""
    return (
        f"to_tsvector('{postgres_config()}'::regconfig, {content}) || "
        f"array_to_tsvector(ARRAY[{POSTGRES_OWNER_SQL.replace('user_id', owner)}])"
    )


def postgres_upgrade() -> None:
    op.execute(f"ALTER TABLE {MESSAGES} ADD COLUMN {SEARCH_VECTOR_COLUMN} tsvector")
    owner = f"(SELECT c.user_id FROM {CONVERSATIONS} c WHERE c.id = NEW.conversation_id)"
    op.execute(
        f"CREATE FUNCTION {VECTOR_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"NEW.{SEARCH_VECTOR_COLUMN} := {postgres_vector('NEW.content', owner)}; "
        "RETURN NEW; END $$"
    )
    op.execute(
        f"CREATE TRIGGER {VECTOR_FUNCTION} BEFORE INSERT OR UPDATE OF content, conversation_id "
        f"ON {MESSAGES} FOR EACH ROW EXECUTE FUNCTION {VECTOR_FUNCTION}()"
    )
    op.execute(
        f"UPDATE {MESSAGES} m SET {SEARCH_VECTOR_COLUMN} = "
        f"{postgres_vector('m.content', 'c.user_id')} FROM {CONVERSATIONS} c "
        "WHERE c.id = m.conversation_id"
    )
    op.execute(f"CREATE INDEX {SEARCH_INDEX} ON {MESSAGES} USING GIN ({SEARCH_VECTOR_COLUMN})")


def upgrade() -> None:
    name = op.get_context().dialect.name
    if name == "sqlite":
        op.execute(
            f"CREATE VIEW {SOURCE} AS SELECT m.id AS id, m.content AS content, "
            f"{OWNER_TOKEN_SQL.replace('user_id', 'c.user_id')} AS owner FROM {MESSAGES} m "
            f"JOIN {CONVERSATIONS} c ON c.id = m.conversation_id"
        )
        op.execute(
            f"CREATE VIRTUAL TABLE {SEARCH_FTS_TABLE} USING fts5(content, owner, "
            f"content='{SOURCE}', content_rowid='id', "
            "tokenize='unicode61 remove_diacritics 2', prefix='2 3')"
        )
        for suffix, body in TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {SEARCH_FTS_TABLE}_{suffix} {body}")
        op.execute(f"INSERT INTO {SEARCH_FTS_TABLE}({SEARCH_FTS_TABLE}) VALUES ('rebuild')")
    elif name == "postgresql":
        postgres_upgrade()
    elif name in ("mysql", "mariadb"):
        # ALGORITHM=COPY: an in-place build after an earlier FULLTEXT index was dropped (a
        # downgrade and upgrade) leaves out the rows stored in between on MariaDB 10.11.
        op.execute(
            f"ALTER TABLE {MESSAGES} ADD FULLTEXT INDEX {FULLTEXT_INDEX} (content), ALGORITHM=COPY"
        )


def downgrade() -> None:
    name = op.get_context().dialect.name
    if name == "sqlite":
        for suffix in TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {SEARCH_FTS_TABLE}_{suffix}")
        op.execute(f"DROP TABLE IF EXISTS {SEARCH_FTS_TABLE}")
        op.execute(f"DROP VIEW IF EXISTS {SOURCE}")
    elif name == "postgresql":
        op.execute(f"DROP TRIGGER IF EXISTS {VECTOR_FUNCTION} ON {MESSAGES}")
        op.execute(f"DROP FUNCTION IF EXISTS {VECTOR_FUNCTION}()")
        op.execute(f"DROP INDEX IF EXISTS {SEARCH_INDEX}")
        op.execute(f"ALTER TABLE {MESSAGES} DROP COLUMN IF EXISTS {SEARCH_VECTOR_COLUMN}")
    elif name in ("mysql", "mariadb"):
        op.execute(f"ALTER TABLE {MESSAGES} DROP INDEX {FULLTEXT_INDEX}")
