"""Conversation search on PostgreSQL: one partial GIN index per owner bucket.

A search's prefix term (`word:*`) is a partial match, for which GIN collects every posting of
the matching words into a bitmap before intersecting it with the owner's lexeme: a common
word's cost grew with every user's messages. Each message now holds its owner's bucket
(`search_bucket`: the first byte of the owner id's md5, modulo 16), set by a trigger on insert
and backfilled here, and the one GIN index of revision 0006 becomes sixteen partial ones, one
per bucket. A search names its owner's bucket, so its bitmap holds the owner's postings and
about a sixteenth of everyone else's.

Other dialects: nothing (their engines intersect the owner inside the index already, or do not
index at all). The downgrade restores revision 0006's single index; messages are untouched.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

from app.db.schema import (
    POSTGRES_BUCKET_SQL,
    SEARCH_BUCKET_COLUMN,
    SEARCH_BUCKETS,
    SEARCH_INDEX,
    SEARCH_VECTOR_COLUMN,
    postgres_bucket_index,
    postgres_bucket_indexes,
)

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

MESSAGES = "amem_conversation_messages"
CONVERSATIONS = "amem_conversations"
BUCKET_FUNCTION = "amem_message_search_bucket"


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute(f"ALTER TABLE {MESSAGES} ADD COLUMN {SEARCH_BUCKET_COLUMN} smallint")
    owner = f"(SELECT c.user_id FROM {CONVERSATIONS} c WHERE c.id = NEW.conversation_id)"
    op.execute(
        f"CREATE FUNCTION {BUCKET_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"NEW.{SEARCH_BUCKET_COLUMN} := {POSTGRES_BUCKET_SQL.replace('user_id', owner)}; "
        "RETURN NEW; END $$"
    )
    op.execute(
        f"CREATE TRIGGER {BUCKET_FUNCTION} BEFORE INSERT OR UPDATE OF conversation_id "
        f"ON {MESSAGES} FOR EACH ROW EXECUTE FUNCTION {BUCKET_FUNCTION}()"
    )
    # The single index goes first, so the backfill does not update it row by row.
    op.execute(f"DROP INDEX IF EXISTS {SEARCH_INDEX}")
    op.execute(
        f"UPDATE {MESSAGES} m SET {SEARCH_BUCKET_COLUMN} = "
        f"{POSTGRES_BUCKET_SQL.replace('user_id', 'c.user_id')} FROM {CONVERSATIONS} c "
        "WHERE c.id = m.conversation_id"
    )
    for statement in postgres_bucket_indexes():
        op.execute(statement)


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute(f"CREATE INDEX {SEARCH_INDEX} ON {MESSAGES} USING GIN ({SEARCH_VECTOR_COLUMN})")
    for bucket in range(SEARCH_BUCKETS):
        op.execute(f"DROP INDEX IF EXISTS {postgres_bucket_index(bucket)}")
    op.execute(f"DROP TRIGGER IF EXISTS {BUCKET_FUNCTION} ON {MESSAGES}")
    op.execute(f"DROP FUNCTION IF EXISTS {BUCKET_FUNCTION}()")
    op.execute(f"ALTER TABLE {MESSAGES} DROP COLUMN IF EXISTS {SEARCH_BUCKET_COLUMN}")
