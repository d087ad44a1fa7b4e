"""Conversation search: a full-text index over amem_conversation_messages, one per dialect,
built from the messages already stored (app/conversations/search.py queries it).

- SQLite: the FTS5 table amem_message_search (external content on the messages table, words
  folded by unicode61 without diacritics, prefix indexes of 2 and 3 characters), kept in sync by
  insert, update and delete triggers, and rebuilt from the stored messages.
- PostgreSQL: a stored generated column `search_vector` (to_tsvector in SEARCH_POSTGRES_CONFIG,
  `simple` by default: no language's stemming or stopwords) and a GIN index on it. Changing the
  setting later means running this revision again (downgrade to 0004, upgrade).
- MariaDB/MySQL: an InnoDB FULLTEXT index on `content` (built by copying the table).
- SQL Server: nothing (search there is LIKE over the caller's messages).

The downgrade removes exactly these objects; the messages are untouched either way.

Revision ID: 0006
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import os
import re

from alembic import op

from app.db.schema import SEARCH_FTS_TABLE, SEARCH_INDEX, SEARCH_VECTOR_COLUMN

revision = "0006"
down_revision = "0004"  # the lead re-points this to "0005" at merge
branch_labels = None
depends_on = None

MESSAGES = "amem_conversation_messages"
FULLTEXT_INDEX = SEARCH_INDEX
TRIGGERS = {
    "ai": f"AFTER INSERT ON {MESSAGES} BEGIN "
    f"INSERT INTO {SEARCH_FTS_TABLE}(rowid, content) VALUES (new.id, new.content); END",
    "ad": f"AFTER DELETE ON {MESSAGES} BEGIN "
    f"INSERT INTO {SEARCH_FTS_TABLE}({SEARCH_FTS_TABLE}, rowid, content) "
    "VALUES ('delete', old.id, old.content); END",
    "au": f"AFTER UPDATE OF content ON {MESSAGES} BEGIN "
    f"INSERT INTO {SEARCH_FTS_TABLE}({SEARCH_FTS_TABLE}, rowid, content) "
    "VALUES ('delete', old.id, old.content); "
    f"INSERT INTO {SEARCH_FTS_TABLE}(rowid, content) VALUES (new.id, new.content); END",
}


def postgres_config() -> str:
    """The text search configuration (an identifier: it is spelled into the DDL)."""
    name = os.environ.get("SEARCH_POSTGRES_CONFIG", "simple").strip() or "simple"
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
        raise RuntimeError(f"SEARCH_POSTGRES_CONFIG must be a configuration name, not {name!r}")
    return name


def upgrade() -> None:
    name = op.get_context().dialect.name
    if name == "sqlite":
        op.execute(
            f"CREATE VIRTUAL TABLE {SEARCH_FTS_TABLE} USING fts5(content, "
            f"content='{MESSAGES}', content_rowid='id', "
            "tokenize='unicode61 remove_diacritics 2', prefix='2 3')"
        )
        for suffix, body in TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {SEARCH_FTS_TABLE}_{suffix} {body}")
        op.execute(f"INSERT INTO {SEARCH_FTS_TABLE}({SEARCH_FTS_TABLE}) VALUES ('rebuild')")
    elif name == "postgresql":
        op.execute(
            f"ALTER TABLE {MESSAGES} ADD COLUMN {SEARCH_VECTOR_COLUMN} tsvector "
            f"GENERATED ALWAYS AS (to_tsvector('{postgres_config()}'::regconfig, content)) STORED"
        )
        op.execute(f"CREATE INDEX {SEARCH_INDEX} ON {MESSAGES} USING GIN ({SEARCH_VECTOR_COLUMN})")
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
    elif name == "postgresql":
        op.execute(f"DROP INDEX IF EXISTS {SEARCH_INDEX}")
        op.execute(f"ALTER TABLE {MESSAGES} DROP COLUMN IF EXISTS {SEARCH_VECTOR_COLUMN}")
    elif name in ("mysql", "mariadb"):
        op.execute(f"ALTER TABLE {MESSAGES} DROP INDEX {FULLTEXT_INDEX}")
