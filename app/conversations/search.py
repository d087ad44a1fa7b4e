"""Full-text search over one user's stored messages: one strategy per dialect behind `search`.

SQLite: the FTS5 table `amem_message_search` (external content, kept in sync by triggers), ranked
by bm25. PostgreSQL: the generated `search_vector` column (a tsvector in the configured text
search configuration, `simple` by default) with a GIN index, ranked by ts_rank. MariaDB/MySQL:
an InnoDB FULLTEXT index, ranked by its relevance; words it cannot index (shorter than three
characters, InnoDB stopwords) fall back to LIKE. SQL Server (and a query with no indexable word
on MariaDB): LIKE over the caller's messages, newest first. Revision 0006 creates the indexes.

The owner is a bound parameter in every strategy; the query is built from words alone (see
`search_text`), so no query text can change the SQL or reach another user's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    and_,
    bindparam,
    column,
    literal_column,
    select,
    table,
    text,
)
from sqlalchemy.sql.elements import TextClause

from app.conversations.search_text import (
    like_pattern,
    mariadb_boolean,
    mariadb_indexed,
    postgres_tsquery,
    sqlite_match,
)
from app.db.schema import (
    SEARCH_FTS_TABLE,
    SEARCH_VECTOR_COLUMN,
    conversation_messages,
    conversations,
)

MAX_RESULTS = 50

messages, owners = conversation_messages, conversations
Ordering = ColumnElement[Any] | TextClause
_fts = table(SEARCH_FTS_TABLE, column("rowid"))


@dataclass(frozen=True)
class SearchHit:
    message_id: int
    conversation_id: str
    title: str
    role: str
    content: str
    created_at: datetime


def _base(user_id: str, exclude_turn_id: str | None) -> tuple[Select[Any], list[Any]]:
    query = select(
        messages.c.id,
        messages.c.conversation_id,
        owners.c.title,
        messages.c.role,
        messages.c.content,
        messages.c.created_at,
    ).select_from(messages.join(owners, owners.c.id == messages.c.conversation_id))
    conditions: list[Any] = [owners.c.user_id == user_id]
    if exclude_turn_id is not None:
        conditions.append(messages.c.turn_id != exclude_turn_id)
    return query, conditions


def _sqlite(query: Select[Any], words: tuple[str, ...]) -> tuple[Select[Any], Ordering]:
    match = text(f"{SEARCH_FTS_TABLE} MATCH :fts_query").bindparams(fts_query=sqlite_match(words))
    joined = query.join(_fts, _fts.c.rowid == messages.c.id).where(match)
    return joined, literal_column(f"bm25({SEARCH_FTS_TABLE})").asc()


def _postgres(
    query: Select[Any], words: tuple[str, ...], config: str
) -> tuple[Select[Any], Ordering]:
    vector = f"{messages.name}.{SEARCH_VECTOR_COLUMN}"
    tsquery = "to_tsquery(CAST(:ts_config AS regconfig), :ts_query)"
    values = {"ts_config": config, "ts_query": postgres_tsquery(words)}
    matched = query.where(text(f"{vector} @@ {tsquery}").bindparams(**values))
    return matched, text(f"ts_rank({vector}, {tsquery}) DESC").bindparams(**values)


def _mariadb(query: Select[Any], words: tuple[str, ...]) -> tuple[Select[Any], Ordering]:
    """FULLTEXT for the words InnoDB indexes, LIKE for the others (all still required)."""
    indexed = mariadb_indexed(words)
    others = tuple(word for word in words if word not in indexed)
    if not indexed:
        return _like(query, words)
    if others:
        query, _newest = _like(query, others)
    against = f"MATCH ({messages.name}.content) AGAINST (:ft_query IN BOOLEAN MODE)"
    boolean = mariadb_boolean(indexed)
    matched = query.where(text(against).bindparams(ft_query=boolean))
    rank = text(f"{against} DESC").bindparams(ft_query=boolean)
    return matched, rank


def _like(query: Select[Any], words: tuple[str, ...]) -> tuple[Select[Any], Ordering]:
    patterns = [
        messages.c.content.like(bindparam(f"like_{index}", like_pattern(word)), escape="\\")
        for index, word in enumerate(words)
    ]
    return query.where(and_(*patterns)), messages.c.created_at.desc()


def search(
    connection: Connection,
    user_id: str,
    words: tuple[str, ...],
    limit: int,
    *,
    exclude_turn_id: str | None = None,
    postgres_config: str = "simple",
) -> list[SearchHit]:
    """The caller's best-matching messages for `words` (all required), best first."""
    if not words:
        return []
    query, conditions = _base(user_id, exclude_turn_id)
    dialect = connection.dialect.name
    if dialect == "sqlite":
        matched, rank = _sqlite(query, words)
    elif dialect == "postgresql":
        matched, rank = _postgres(query, words, postgres_config)
    elif dialect in ("mysql", "mariadb"):
        matched, rank = _mariadb(query, words)
    else:
        matched, rank = _like(query, words)
    statement = (
        matched.where(*conditions)
        .order_by(rank, messages.c.id.desc())
        .limit(max(1, min(limit, MAX_RESULTS)))
    )
    return [SearchHit(*row) for row in connection.execute(statement).all()]
