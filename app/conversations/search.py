"""Full-text search over one user's stored messages: one strategy per dialect behind `search`.

SQLite: the FTS5 table `amem_message_search` (external content, kept in sync by triggers) over
each message's words and its owner's token, so the owner is matched inside the index; ranked by
bm25. PostgreSQL: the `search_vector` column (a tsvector in the configured text search
configuration, `simple` by default, plus the owner's lexeme) with a GIN index, ranked by
ts_rank. MariaDB/MySQL: an InnoDB FULLTEXT index, ranked by its relevance; words it cannot
index (shorter than three characters, InnoDB stopwords) fall back to LIKE. SQL Server (and a
query with no indexable word on MariaDB): LIKE over the caller's messages, newest first.
Revision 0006 creates the indexes. Ranking looks at the caller's newest CANDIDATES matches (all
of them, unless a word is in more than that many of their messages), so a very common word
stays fast.

The owner is a bound parameter in every strategy (in the index where it holds the owner, and
always on the join); the query is built from words alone (see `search_text`), so no query text
can change the SQL or reach another user's rows.
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
    cast,
    column,
    func,
    literal,
    literal_column,
    select,
    table,
    text,
)
from sqlalchemy.dialects.mysql import match
from sqlalchemy.dialects.postgresql import REGCONFIG, TSQUERY

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
    owner_token,
    postgres_owner_lexeme,
)

MAX_RESULTS = 50
CANDIDATES = 1_000
HIT_COLUMNS = ("id", "conversation_id", "title", "role", "content", "created_at")

messages, owners = conversation_messages, conversations
Score = ColumnElement[Any]
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


def _sqlite(query: Select[Any], words: tuple[str, ...], user_id: str) -> tuple[Select[Any], Score]:
    """The owner's token and the words, intersected inside the index (the owner is also checked
    on the join, like every strategy)."""
    fts_query = f'owner : "{owner_token(user_id)}" AND content : ({sqlite_match(words)})'
    match = text(f"{SEARCH_FTS_TABLE} MATCH :fts_query").bindparams(fts_query=fts_query)
    joined = query.join(_fts, _fts.c.rowid == messages.c.id).where(match)
    return joined, -func.bm25(literal_column(SEARCH_FTS_TABLE))  # bm25: lower is better


def _postgres(
    query: Select[Any], words: tuple[str, ...], config: str, user_id: str
) -> tuple[Select[Any], Score, ColumnElement[Any]]:
    """The matches, with their tsvector (ranked outside the candidates) and the tsquery."""
    vector: ColumnElement[Any] = literal_column(f"{messages.name}.{SEARCH_VECTOR_COLUMN}")
    words_query = func.to_tsquery(
        cast(bindparam("ts_config", config), REGCONFIG),
        bindparam("ts_query", postgres_tsquery(words)),
    )
    owner = cast(bindparam("ts_owner", f"'{postgres_owner_lexeme(user_id)}'"), TSQUERY)
    tsquery = words_query.op("&&")(owner)  # the owner's lexeme and the words, in the index
    return query.where(vector.op("@@", is_comparison=True)(tsquery)), vector, tsquery


def _mariadb(query: Select[Any], words: tuple[str, ...]) -> tuple[Select[Any], Score]:
    """FULLTEXT for the words InnoDB indexes, LIKE for the others (all still required)."""
    indexed = mariadb_indexed(words)
    others = tuple(word for word in words if word not in indexed)
    if not indexed:
        return _like(query, words)
    if others:
        query, _none = _like(query, others)
    relevance = match(
        messages.c.content, against=bindparam("ft_query", mariadb_boolean(indexed))
    ).in_boolean_mode()
    return query.where(relevance), relevance


def _like(query: Select[Any], words: tuple[str, ...]) -> tuple[Select[Any], Score]:
    patterns = [
        messages.c.content.like(bindparam(f"like_{index}", like_pattern(word)), escape="\\")
        for index, word in enumerate(words)
    ]
    return query.where(and_(*patterns)), literal(0)  # unranked: newest first


def statement(
    dialect: str,
    user_id: str,
    words: tuple[str, ...],
    limit: int,
    *,
    exclude_turn_id: str | None = None,
    postgres_config: str = "simple",
) -> Select[Any]:
    """The query for `dialect` (a SQLAlchemy dialect name); `words` must not be empty."""
    query, conditions = _base(user_id, exclude_turn_id)
    tsquery: ColumnElement[Any] | None = None
    if dialect == "sqlite":
        matched, score = _sqlite(query, words, user_id)
    elif dialect == "postgresql":
        # ts_rank reads each tsvector: the candidates carry the tsvector (as `score`) and are
        # ranked outside, so only they are scored, not every match.
        matched, score, tsquery = _postgres(query, words, postgres_config, user_id)
    elif dialect in ("mysql", "mariadb"):
        matched, score = _mariadb(query, words)
    else:
        matched, score = _like(query, words)
    # Rank the newest CANDIDATES matches (all of them for most queries): the engines then stop
    # early for a word in most messages instead of scoring every one of them.
    # SQLite orders by the FTS5 rowid (the message id): FTS5 then returns matches newest first
    # from its own index and stops at the limit, instead of sorting every match.
    newest = _fts.c.rowid if dialect == "sqlite" else messages.c.id
    candidates = (
        matched.add_columns(score.label("score"))
        .where(*conditions)
        .order_by(newest.desc())
        .limit(CANDIDATES)
        .subquery("candidates")
    )
    ranked = candidates.c.score if tsquery is None else func.ts_rank(candidates.c.score, tsquery)
    return (
        select(*(candidates.c[name] for name in HIT_COLUMNS))
        .order_by(ranked.desc(), candidates.c.id.desc())
        .limit(max(1, min(limit, MAX_RESULTS)))
    )


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
    query = statement(
        connection.dialect.name,
        user_id,
        words,
        limit,
        exclude_turn_id=exclude_turn_id,
        postgres_config=postgres_config,
    )
    return [SearchHit(*row) for row in connection.execute(query).all()]
