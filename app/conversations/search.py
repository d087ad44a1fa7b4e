"""Ranked full-text search over one user's stored messages: one strategy per dialect behind
`search`, every one answering the same question: which of the owner's messages match ANY of the
query's words (and every quoted phrase), best first by relevance (rarer words, more of them, in
a shorter message), ties newest first.

SQLite: the FTS5 table `amem_message_search` (external content, kept in sync by triggers) over
each message's words and its owner's token, so the owner is matched inside the index; ranked by
FTS5's own `bm25()` (the owner's column weighted 0). PostgreSQL: the `search_vector` column (a
tsvector in the configured text search configuration, `simple` by default, plus the owner's
lexeme) with one partial GIN index per owner bucket (`search_bucket`, revision 0007); ranked by
BM25 computed in the statement over the owner's matches: each part's frequency in the message
from `ts_rank_cd` (exact for a word), its document frequency and the owner's message count from
the owner's own rows, so the cost is the owner's, not the table's. MariaDB/MySQL: an InnoDB
FULLTEXT index in boolean mode with optional words, ranked by its relevance (TF-IDF over the
table); words it cannot index (shorter than three characters, InnoDB stopwords) are left out
when others remain, else LIKE. SQL Server: LIKE, ranked by how many of the words a message holds.
Revision 0006 creates the indexes.

The owner is a bound parameter in every strategy (in the index where it holds the owner, and
always on the join); the query is built from words alone (see `search_text`), so no query text
can change the SQL or reach another user's rows. Each statement shape (dialect, how many terms
and phrases, whether a turn is left out, the limit; on PostgreSQL the owner's bucket, an integer
spelled into the SQL) is built once and run with its values bound.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Float,
    Select,
    and_,
    bindparam,
    case,
    cast,
    column,
    func,
    literal,
    literal_column,
    or_,
    select,
    table,
    text,
    true,
    type_coerce,
)
from sqlalchemy.dialects.mysql import match
from sqlalchemy.dialects.postgresql import REGCONFIG, TSQUERY

from app.conversations.search_text import (
    SearchQuery,
    like_pattern,
    mariadb_boolean,
    mariadb_phrases,
    parse_query,
    postgres_parts,
    postgres_tsquery,
    sqlite_match,
    text_bm25,
)
from app.db.schema import (
    SEARCH_BUCKET_COLUMN,
    SEARCH_FTS_TABLE,
    SEARCH_VECTOR_COLUMN,
    conversation_messages,
    conversations,
    owner_token,
    postgres_owner_lexeme,
    postgres_search_bucket,
)

MAX_RESULTS = 50
# BM25's parameters (PostgreSQL's rank; FTS5's bm25() has the same defaults built in).
K1, B = 1.2, 0.75
HIT_COLUMNS = ("id", "conversation_id", "title", "role", "content", "created_at")

messages, owners = conversation_messages, conversations
Score = ColumnElement[Any]
_fts = table(SEARCH_FTS_TABLE, column("rowid"))


@dataclass(frozen=True)
class SearchHit:
    """One of the owner's messages that matched, with its relevance `score` (higher is better;
    comparable within one search only, not across searches or dialects)."""

    message_id: int
    conversation_id: str
    title: str
    role: str
    content: str
    created_at: datetime
    score: float


# `search`'s project: every conversation of the owner's (the default, never a project's id),
# None: only conversations outside projects, an id: only that project's conversations.
ANY_PROJECT = "*"


def _project_mode(project: str | None) -> int:
    return 0 if project == ANY_PROJECT else 1 if project is None else 2


def _project_conditions(mode: int) -> list[Any]:
    """The scope's conversations; never a temporary chat (docs/privacy.md)."""
    listed = owners.c.temporary.is_(False)
    if mode == 1:
        return [listed, owners.c.project_id.is_(None)]
    if mode == 2:
        project = bindparam("project_key", type_=owners.c.project_id.type)
        return [listed, owners.c.project_id == project]
    return [listed]


def _owned(exclude_turn: bool, project_mode: int) -> list[Any]:
    conditions: list[Any] = [
        owners.c.user_id == bindparam("owner_id"),
        *_project_conditions(project_mode),
    ]
    if exclude_turn:
        conditions.append(messages.c.turn_id != bindparam("exclude_turn_id"))
    return conditions


def _joined() -> Any:
    return messages.join(owners, owners.c.id == messages.c.conversation_id)


def _hits(score: Score) -> Select[Any]:
    return select(
        messages.c.id,
        messages.c.conversation_id,
        owners.c.title,
        messages.c.role,
        messages.c.content,
        messages.c.created_at,
        type_coerce(score, Float).label("score"),
    ).select_from(_joined())


# -- SQLite: FTS5 finds, BM25 over the owner's matches in Python ---------------------------------

# The owner's newest matches ranked (all of them but for a word in more of the owner's messages
# than this): a bound on the cost of a word found almost everywhere.
CANDIDATES = 5_000


def _sqlite(exclude_turn: bool, project_mode: int) -> Select[Any]:
    """The owner's token and the query, intersected inside the index (the owner is also checked
    on the join, like every strategy): the owner's newest CANDIDATES matches, taken newest first
    from the index itself (by its rowid, the message id), as their id and text alone: ranked by
    `bm25_scores`, and only the best read whole (`_sqlite_rows`)."""
    return (
        select(messages.c.id, messages.c.content)
        .select_from(_joined())
        .join(_fts, _fts.c.rowid == messages.c.id)
        .where(text(f"{SEARCH_FTS_TABLE} MATCH :fts_query"), *_owned(exclude_turn, project_mode))
        .order_by(_fts.c.rowid.desc())
        .limit(CANDIDATES)
    )


def _sqlite_rows() -> Select[Any]:
    """The best candidates' rows, by id (the owner checked again)."""
    return _hits(literal(0.0)).where(
        messages.c.id.in_(bindparam("best_ids", expanding=True)),
        owners.c.user_id == bindparam("owner_id"),
    )


def _owner_total(project_mode: int) -> Select[Any]:
    """The owner's messages in scope: BM25's N (an index-only count)."""
    return (
        select(func.count())
        .select_from(_joined())
        .where(*_owned(exclude_turn=False, project_mode=project_mode))
    )


def bm25_scores(contents: list[str], query: SearchQuery, total: int) -> list[float]:
    """BM25 (k1 1.2, b 0.75, Lucene's IDF) of each of the owner's matching messages for the
    query's parts (`text_bm25`), with the owner's own statistics: N the owner's messages in
    scope, each part's document frequency counted among the matches (every message holding a
    part matches), the average length that of the matches. Not FTS5's bm25(): it counts the
    whole table's rows for its IDF (every user's), which ranked a person's own rare words
    lower and cost recall (docs/conversation-search.md)."""
    return text_bm25(contents, query, total, K1, B)


# -- PostgreSQL: BM25 over the owner's matches ---------------------------------------------------


def _config_query(name: str) -> ColumnElement[Any]:
    return func.to_tsquery(cast(bindparam("ts_config"), REGCONFIG), bindparam(name))


def _postgres(
    parts: int, exclude_turn: bool, limit: int, owner_bucket: int, project_mode: int
) -> Select[Any]:
    """BM25 in one statement. The owner's matches (the GIN index of the owner's bucket, the
    owner's lexeme intersected with the query inside it, the owner checked on the join) carry
    their id and tsvector; over them, each part's document frequency and the average length;
    the owner's message count in scope; each match's score; only the best `limit` are joined to
    their rows. A part's frequency in a message is `ts_rank_cd` with every weight 1: the number
    of its occurrences for a word or prefix (a phrase: its covers, each near 1)."""
    vector: ColumnElement[Any] = literal_column(f"{messages.name}.{SEARCH_VECTOR_COLUMN}")
    bucket: ColumnElement[Any] = literal_column(f"{messages.name}.{SEARCH_BUCKET_COLUMN}")
    # The owner's bucket is spelled into the SQL (an integer computed here, never user text),
    # so that the planner picks that bucket's partial index whatever plan it caches.
    owned_bucket = bucket == literal_column(str(int(owner_bucket)))
    matched = _config_query("ts_query")
    # Words the configuration's parser drops leave an empty tsquery, and the owner's lexeme
    # alone would then match every message the owner has: such a query finds nothing.
    has_words = func.numnode(matched) > 0
    in_index = matched.op("&&")(cast(bindparam("ts_owner"), TSQUERY))
    candidates = (
        select(messages.c.id, vector.label("vector"))
        .select_from(_joined())
        .where(
            vector.op("@@", is_comparison=True)(in_index),
            owned_bucket,
            has_words,
            *_owned(exclude_turn, project_mode),
        )
        .cte("candidates")
    )
    part_queries = [_config_query(f"ts_part_{index}") for index in range(parts)]
    # The owner's messages in the same scope: BM25's N, so a word's rarity is the owner's.
    # Every statistic is a scalar subquery (run once, before the ranking) over the two CTEs
    # (each computed once): as joined subqueries the planner re-ran them for every match.
    # MATERIALIZED: PostgreSQL inlines a CTE named once (a query of one word), and then counted
    # the owner's messages again for every match (4.9 s for a common word among a million).
    total = (
        select(func.count().label("n"))
        .select_from(_joined())
        .where(*_owned(exclude_turn=False, project_mode=project_mode))
        .cte("total")
        .prefix_with("MATERIALIZED")
    )
    owner_total = select(total.c.n).scalar_subquery()
    average = select(func.greatest(func.avg(func.length(candidates.c.vector)), 1))
    ones: ColumnElement[Any] = literal_column("'{1,1,1,1}'::float4[]")
    norm = K1 * (1 - B + B * func.length(candidates.c.vector) / average.scalar_subquery())
    score: Score = literal(0.0)
    for query in part_queries:
        df = func.count().filter(candidates.c.vector.op("@@", is_comparison=True)(query))
        idf = (
            select(func.ln(1 + (owner_total - df + 0.5) / (df + 0.5)))
            .select_from(candidates)
            .scalar_subquery()
        )
        tf = func.ts_rank_cd(ones, candidates.c.vector, query)
        score = score + idf * tf * (K1 + 1) / (tf + norm)
    rank = score.label("rank")
    best = (
        select(candidates.c.id, rank)
        .order_by(rank.desc(), candidates.c.id.desc())
        .limit(limit)
        .subquery("best")
    )
    return (
        _hits(best.c.rank)
        .join(best, best.c.id == messages.c.id)
        .where(*_owned(exclude_turn=False, project_mode=0))
        .order_by(best.c.rank.desc(), best.c.id.desc())
    )


# -- MariaDB / MySQL: FULLTEXT, or LIKE -------------------------------------------------------


def _like_any(terms: int, phrases: int) -> tuple[Any, Score]:
    """LIKE: any term and every phrase (each as its words with single spaces); the score is how
    many of the terms a message holds."""
    term_likes = [
        messages.c.content.like(bindparam(f"like_{index}"), escape="\\") for index in range(terms)
    ]
    phrase_likes = [
        messages.c.content.like(bindparam(f"like_phrase_{index}"), escape="\\")
        for index in range(phrases)
    ]
    held: Score = literal(0)
    for condition in term_likes:
        held = held + case((condition, 1), else_=0)
    conditions = [*phrase_likes] + ([or_(*term_likes)] if term_likes and not phrases else [])
    return and_(true(), *conditions), held


def _mariadb(
    indexed: bool, terms: int, phrases: int, exclude_turn: bool, limit: int, project_mode: int
) -> Select[Any]:
    """FULLTEXT in boolean mode for what InnoDB indexes (optional words, required phrases),
    ranked by its relevance; phrases it cannot index are required by LIKE. Without anything
    indexable, LIKE alone (`_like_any`)."""
    if not indexed:
        return _like_statement(terms, phrases, exclude_turn, limit, project_mode)
    relevance = match(messages.c.content, against=bindparam("ft_query")).in_boolean_mode()
    condition, _held = _like_any(0, phrases)
    return (
        _hits(relevance)
        .where(relevance, condition, *_owned(exclude_turn, project_mode))
        .order_by(literal_column("score").desc(), messages.c.id.desc())
        .limit(limit)
    )


def _like_statement(
    terms: int, phrases: int, exclude_turn: bool, limit: int, project_mode: int
) -> Select[Any]:
    condition, held = _like_any(terms, phrases)
    return (
        _hits(held)
        .where(condition, *_owned(exclude_turn, project_mode))
        .order_by(held.desc(), messages.c.id.desc())
        .limit(limit)
    )


# -- shapes and values --------------------------------------------------------------------------


@functools.lru_cache(maxsize=2048)
def _shape(
    dialect: str,
    terms: int,
    phrases: int,
    indexed: bool,
    exclude_turn: bool,
    limit: int,
    bucket: int,
    project_mode: int,
) -> Select[Any]:
    """The statement for one shape of query, every value but PostgreSQL's owner bucket a named
    bind parameter (`_values`): built once per shape, as building it costs more than the
    search of a rare word."""
    if dialect == "sqlite":
        return _sqlite(exclude_turn, project_mode)
    if dialect == "postgresql":
        return _postgres(terms + phrases, exclude_turn, limit, bucket, project_mode)
    if dialect in ("mysql", "mariadb"):
        return _mariadb(indexed, terms, phrases, exclude_turn, limit, project_mode)
    return _like_statement(terms, phrases, exclude_turn, limit, project_mode)


def _like_values(query: SearchQuery, phrases: tuple[tuple[str, ...], ...]) -> dict[str, Any]:
    values = {f"like_{index}": like_pattern(word) for index, word in enumerate(query.terms)}
    values.update(
        (f"like_phrase_{index}", like_pattern(" ".join(phrase)))
        for index, phrase in enumerate(phrases)
    )
    return values


def _prepared(
    dialect: str,
    user_id: str,
    query: SearchQuery,
    limit: int,
    exclude_turn_id: str | None,
    postgres_config: str,
    project: str | None,
) -> tuple[Select[Any], dict[str, Any]]:
    values: dict[str, Any] = {"owner_id": user_id}
    mode = _project_mode(project)
    if mode == 2:
        values["project_key"] = project
    if exclude_turn_id is not None:
        values["exclude_turn_id"] = exclude_turn_id
    terms, phrases, indexed, bucket = len(query.terms), len(query.phrases), False, 0
    if dialect == "sqlite":
        match_text = f'owner : "{owner_token(user_id)}" AND content : ({sqlite_match(query)})'
        values["fts_query"] = match_text
    elif dialect == "postgresql":
        bucket = postgres_search_bucket(user_id)
        values["ts_config"] = postgres_config
        values["ts_query"] = postgres_tsquery(query)
        values["ts_owner"] = f"'{postgres_owner_lexeme(user_id)}'"
        values.update(
            (f"ts_part_{index}", part) for index, part in enumerate(postgres_parts(query))
        )
    elif dialect in ("mysql", "mariadb"):
        boolean = mariadb_boolean(query)
        indexed = bool(boolean)
        if indexed:
            values["ft_query"] = boolean
            unindexed = mariadb_phrases(query)[1]
            values.update(_like_values(SearchQuery(), unindexed))
            phrases = len(unindexed)
        else:
            values.update(_like_values(query, query.phrases))
    else:
        values.update(_like_values(query, query.phrases))
    shape = _shape(
        dialect,
        terms,
        phrases,
        indexed,
        exclude_turn_id is not None,
        max(1, min(limit, MAX_RESULTS)),
        bucket,
        mode,
    )
    return shape, values


def statement(
    dialect: str,
    user_id: str,
    query: SearchQuery | str,
    limit: int,
    *,
    exclude_turn_id: str | None = None,
    postgres_config: str = "simple",
    project: str | None = ANY_PROJECT,
) -> Select[Any]:
    """The query for `dialect` (a SQLAlchemy dialect name) with its values bound, for EXPLAIN
    and compile checks; the query must hold a word. `search` runs the same statement."""
    parsed = parse_query(query) if isinstance(query, str) else query
    shape, values = _prepared(
        dialect, user_id, parsed, limit, exclude_turn_id, postgres_config, project
    )
    return shape.params(values)


def search(
    connection: Connection,
    user_id: str,
    query: SearchQuery | str,
    limit: int,
    *,
    exclude_turn_id: str | None = None,
    postgres_config: str = "simple",
    project: str | None = ANY_PROJECT,
) -> list[SearchHit]:
    """The owner's messages that match `query` (any word, every quoted phrase; text is parsed
    by `parse_query`), best first with their scores, ties newest first, at most `limit`
    (capped at MAX_RESULTS); `project` narrows them to one project's conversations, or (None)
    to those outside projects; `exclude_turn_id` leaves out one turn's messages."""
    parsed = parse_query(query) if isinstance(query, str) else query
    if not parsed:
        return []
    dialect = connection.dialect.name
    shape, values = _prepared(
        dialect, user_id, parsed, limit, exclude_turn_id, postgres_config, project
    )
    if dialect == "sqlite":
        return _ranked_here(connection, shape, values, parsed, limit, _project_mode(project))
    if dialect != "postgresql":
        return [SearchHit(*row) for row in connection.execute(shape, values).all()]
    # Planned for its own words and owner every time, never prepared: psycopg prepares a
    # statement after a few runs, and PostgreSQL's generic plan for it, made without knowing
    # how rare the words are, reads the owner's messages conversation by conversation (a rare
    # word many times slower; docs/conversation-search.md).
    driver = connection.connection.driver_connection
    threshold = driver.prepare_threshold  # type: ignore[union-attr]
    driver.prepare_threshold = None  # type: ignore[union-attr]
    try:
        return [SearchHit(*row) for row in connection.execute(shape, values).all()]
    finally:
        driver.prepare_threshold = threshold  # type: ignore[union-attr]


def _ranked_here(
    connection: Connection,
    shape: Select[Any],
    values: dict[str, Any],
    query: SearchQuery,
    limit: int,
    project_mode: int,
) -> list[SearchHit]:
    rows = connection.execute(shape, values).all()
    if not rows:
        return []
    count_values = {key: value for key, value in values.items() if key != "exclude_turn_id"}
    total = connection.execute(_total_shape(project_mode), count_values).scalar_one()
    scores = bm25_scores([row.content for row in rows], query, max(int(total), len(rows)))
    best = sorted(range(len(rows)), key=lambda index: (-scores[index], -rows[index].id))
    chosen = {rows[index].id: scores[index] for index in best[: max(1, min(limit, MAX_RESULTS))]}
    found = {
        row.id: row
        for row in connection.execute(
            _rows_shape(), {"best_ids": list(chosen), "owner_id": values["owner_id"]}
        )
    }
    return [
        SearchHit(
            row.id, row.conversation_id, row.title, row.role, row.content, row.created_at, score
        )
        for row, score in ((found[key], score) for key, score in chosen.items() if key in found)
    ]


@functools.lru_cache(maxsize=8)
def _total_shape(project_mode: int) -> Select[Any]:
    return _owner_total(project_mode)


@functools.lru_cache(maxsize=1)
def _rows_shape() -> Select[Any]:
    return _sqlite_rows()


# FTS5 keeps a deleted row's terms in its index segments (the `_data` shadow table) until the
# segments are merged; 'optimize' merges them all into one, which drops every deleted term.
# (SQLite 3.42 added a `secure-delete` option for this; the SQLite here may be older.)
_FTS_OPTIMIZE = text(f"INSERT INTO {SEARCH_FTS_TABLE}({SEARCH_FTS_TABLE}) VALUES ('optimize')")


def drop_deleted_terms(connection: Connection) -> None:
    """In the transaction that deleted messages, on SQLite: make their words unreadable from the
    index's storage. The cost grows with the whole index (docs/privacy.md has a measurement).
    PostgreSQL's tsvector is a column of the deleted row itself (a dead tuple until VACUUM)."""
    if connection.dialect.name == "sqlite":
        connection.execute(_FTS_OPTIMIZE)


# InnoDB's FULLTEXT index keeps a deleted row's words (in its cache and auxiliary tables) until
# OPTIMIZE TABLE; with the server's innodb_optimize_fulltext_only on, that statement works on
# the index alone, without rebuilding the table.
_FULLTEXT_ONLY = text("SELECT @@GLOBAL.innodb_optimize_fulltext_only")
_OPTIMIZE_MESSAGES = text(f"OPTIMIZE TABLE {conversation_messages.name}")
# A pass first finishes the cleanup cycle an earlier deletion began (its deleted rows were set
# aside when that cycle started), so the rows deleted now need the next one. Each pass rewrites
# at most innodb_ft_num_word_optimize words: a larger index needs more (docs/privacy.md).
FULLTEXT_OPTIMIZE_PASSES = 2


def optimize_fulltext(engine: Engine) -> bool:
    """After the transaction that deleted messages, on MariaDB/MySQL: drop their words from the
    FULLTEXT index when the server allows it cheaply (innodb_optimize_fulltext_only). Whether
    the index was optimized (True elsewhere: nothing to do); docs/privacy.md has the rest."""
    if engine.dialect.name not in ("mysql", "mariadb"):
        return True
    with engine.connect() as connection:
        if not connection.execute(_FULLTEXT_ONLY).scalar():
            connection.rollback()
            return False
        connection.rollback()
        for _ in range(FULLTEXT_OPTIMIZE_PASSES):
            connection.execute(_OPTIMIZE_MESSAGES).all()  # implicitly commits: its own statement
    return True
