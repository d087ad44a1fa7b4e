"""Full-text search over one user's stored messages: one strategy per dialect behind `search`.

SQLite: the FTS5 table `amem_message_search` (external content, kept in sync by triggers) over
each message's words and its owner's token, so the owner is matched inside the index; ranked by
the words' frequency in each candidate (`term_frequency_rank`). PostgreSQL: the `search_vector`
column (a tsvector in the configured text search configuration, `simple` by default, plus the
owner's lexeme) with one partial GIN index per owner bucket (`search_bucket`, revision 0007),
ranked by ts_rank. MariaDB/MySQL: an InnoDB FULLTEXT index,
ranked by its relevance; words it cannot index (shorter than three characters, InnoDB
stopwords) fall back to LIKE. SQL Server (and a query with no indexable word on MariaDB): LIKE
over the caller's messages, newest first. Revision 0006 creates the indexes. Ranking looks at
the caller's newest CANDIDATES matches (all of them, unless a word is in more than that many of
their messages), so a very common word stays fast.

The owner is a bound parameter in every strategy (in the index where it holds the owner, and
always on the join); the query is built from words alone (see `search_text`), so no query text
can change the SQL or reach another user's rows. Each statement shape (dialect, how many words,
whether a turn is left out, the limit; on PostgreSQL the owner's bucket, an integer spelled
into the SQL) is built once and run with its values bound.
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
    Select,
    Subquery,
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
CANDIDATES = 1_000
AVERAGE_MESSAGE_CHARS = 200.0  # the length at which BM25 neither favours nor penalizes
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


def _base(exclude_turn: bool, project_mode: int = 0) -> tuple[Select[Any], list[Any]]:
    query = select(
        messages.c.id,
        messages.c.conversation_id,
        owners.c.title,
        messages.c.role,
        messages.c.content,
        messages.c.created_at,
    ).select_from(messages.join(owners, owners.c.id == messages.c.conversation_id))
    conditions: list[Any] = [
        owners.c.user_id == bindparam("owner_id"),
        *_project_conditions(project_mode),
    ]
    if exclude_turn:
        conditions.append(messages.c.turn_id != bindparam("exclude_turn_id"))
    return query, conditions


def _sqlite(query: Select[Any]) -> Select[Any]:
    """The owner's token and the words, intersected inside the index (the owner is also checked
    on the join, like every strategy); ranked outside the candidates by `term_frequency_rank`."""
    match = text(f"{SEARCH_FTS_TABLE} MATCH :fts_query")
    return query.join(_fts, _fts.c.rowid == messages.c.id).where(match)


def term_frequencies(needles: int) -> list[ColumnElement[Any]]:
    """For each word (bound as `tf_N`), how often it occurs in the message's text (ASCII case
    folded), labelled `tf_N`: computed once per candidate, inside the candidates."""
    folded = func.lower(messages.c.content)  # ASCII only, so it keeps the length
    frequencies: list[ColumnElement[Any]] = []
    for index in range(needles):
        needle: Score = bindparam(f"tf_{index}")
        removed = func.length(messages.c.content) - func.length(func.replace(folded, needle, ""))
        frequencies.append((removed / func.length(needle)).label(f"tf_{index}"))
    return frequencies


def term_frequency_rank(candidates: Subquery, needles: int) -> Score:
    """BM25's term-frequency part (k1 1.2, b 0.75) without its IDF: each word's frequency in
    the message, saturated and normalized by the message's length in characters.

    Not FTS5's bm25(): on every query it counts every row of the whole table that holds each
    term of the query (the owner's token too), so its cost grows with the table rather than
    with the candidates (docs/conversation-search.md has the figures). This costs a
    few string functions per candidate. Every candidate holds every word (all are required), so
    the IDF would only weigh one word's repeats against another's."""
    norm = 1.2 * (0.25 + 0.75 * func.length(candidates.c.content) / AVERAGE_MESSAGE_CHARS)
    rank: Score = literal(0.0)
    for index in range(needles):
        tf = candidates.c[f"tf_{index}"]
        rank = rank + tf * 2.2 / (tf + norm)
    return rank


def _words_tsquery() -> ColumnElement[Any]:
    return func.to_tsquery(cast(bindparam("ts_config"), REGCONFIG), bindparam("ts_query"))


def _tsquery() -> ColumnElement[Any]:
    """The owner's lexeme and the words, intersected inside the index."""
    return _words_tsquery().op("&&")(cast(bindparam("ts_owner"), TSQUERY))


def _postgres(
    exclude_turn: bool, limit: int, owner_bucket: int, project_mode: int = 0
) -> Select[Any]:
    """The owner's newest CANDIDATES matches carry only their id and tsvector; they are ranked
    by ts_rank, and only the best `limit` are joined to their rows and conversations (the owner
    checked again). Carrying every match's content and title through the sort to the newest
    had cost as much as finding a common word's matches."""
    vector: ColumnElement[Any] = literal_column(f"{messages.name}.{SEARCH_VECTOR_COLUMN}")
    bucket: ColumnElement[Any] = literal_column(f"{messages.name}.{SEARCH_BUCKET_COLUMN}")
    # The owner's bucket is spelled into the SQL (an integer computed here, never user text),
    # so that the planner picks that bucket's partial index whatever plan it caches.
    owned_bucket = bucket == literal_column(str(int(owner_bucket)))
    # Words the configuration's parser drops leave an empty tsquery, and the owner's lexeme
    # alone would then match every message the owner has: such a query finds nothing.
    has_words = func.numnode(_words_tsquery()) > 0
    conditions: list[Any] = [
        vector.op("@@", is_comparison=True)(_tsquery()),
        owned_bucket,
        has_words,
    ]
    if exclude_turn:
        conditions.append(messages.c.turn_id != bindparam("exclude_turn_id"))
    # `id + 0` is not the primary key's order, so the planner keeps the GIN scan, bounded by
    # the owner's matches, instead of walking every user's messages newest first until
    # enough of them match (a common word's worst case: over 100,000 rows).
    # The owner is checked on the conversation before the newest are kept, not only after the
    # rank: the owner's lexeme shares the tsvector with the words, so another user's message
    # can spell it, and such messages must not take the owner's candidates.
    candidates = (
        select(messages.c.id, vector.label("vector"))
        .select_from(messages.join(owners, owners.c.id == messages.c.conversation_id))
        .where(
            *conditions,
            owners.c.user_id == bindparam("owner_id"),
            *_project_conditions(project_mode),
        )
        .order_by((messages.c.id + literal_column("0")).desc())
        .limit(CANDIDATES)
        .subquery("candidates")
    )
    rank = func.ts_rank(candidates.c.vector, _tsquery()).label("rank")
    best = (
        select(candidates.c.id, rank)
        .order_by(rank.desc(), candidates.c.id.desc())
        .limit(limit)
        .subquery("best")
    )
    query, owned = _base(exclude_turn=False)
    return (
        query.join(best, best.c.id == messages.c.id)
        .where(*owned)
        .order_by(best.c.rank.desc(), best.c.id.desc())
    )


def _mariadb(query: Select[Any], indexed: bool, others: int) -> tuple[Select[Any], Score]:
    """FULLTEXT for the words InnoDB indexes, LIKE for the others (all still required)."""
    if not indexed:
        return _like(query, others)
    if others:
        query, _none = _like(query, others)
    relevance = match(messages.c.content, against=bindparam("ft_query")).in_boolean_mode()
    return query.where(relevance), relevance


def _like(query: Select[Any], count: int) -> tuple[Select[Any], Score]:
    patterns = [
        messages.c.content.like(bindparam(f"like_{index}"), escape="\\") for index in range(count)
    ]
    return query.where(and_(*patterns)), literal(0)  # unranked: newest first


def _split(dialect: str, words: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """MariaDB's FULLTEXT words and LIKE words; every other dialect: (), words."""
    if dialect not in ("mysql", "mariadb"):
        return (), words
    indexed = mariadb_indexed(words)
    return indexed, tuple(word for word in words if word not in indexed)


@functools.lru_cache(maxsize=2048)
def _shape(
    dialect: str,
    indexed: bool,
    others: int,
    exclude_turn: bool,
    limit: int,
    bucket: int,
    project_mode: int = 0,
) -> Select[Any]:
    """The statement for one shape of query, every value but PostgreSQL's owner bucket a named
    bind parameter (`_values`): built once per shape, as building it costs more than the
    search of a rare word."""
    if dialect == "postgresql":
        return _postgres(exclude_turn, limit, bucket, project_mode)
    query, conditions = _base(exclude_turn, project_mode)
    matched: Select[Any]
    score: Score
    carried: list[ColumnElement[Any]] = []
    if dialect == "sqlite":
        matched, score, carried = _sqlite(query), literal(0), term_frequencies(others)
    elif dialect in ("mysql", "mariadb"):
        matched, score = _mariadb(query, indexed, others)
    else:
        matched, score = _like(query, others)
    # Rank the newest CANDIDATES matches (all of them for most queries): the engines then stop
    # early for a word in most messages instead of scoring every one of them.
    # SQLite orders by the FTS5 rowid (the message id): FTS5 then returns matches newest first
    # from its own index and stops at the limit, instead of sorting every match.
    sqlite = dialect == "sqlite"
    newest = _fts.c.rowid if sqlite else messages.c.id
    candidates = (
        matched.add_columns(score.label("score"), *carried)
        .where(*conditions)
        .order_by(newest.desc())
        .limit(CANDIDATES)
        .subquery("candidates")
    )
    ranked = term_frequency_rank(candidates, others) if sqlite else candidates.c.score
    return (
        select(*(candidates.c[name] for name in HIT_COLUMNS))
        .order_by(ranked.desc(), candidates.c.id.desc())
        .limit(limit)
    )


def _values(
    dialect: str,
    user_id: str,
    words: tuple[str, ...],
    split: tuple[tuple[str, ...], tuple[str, ...]],
    exclude_turn_id: str | None,
    postgres_config: str,
    project: str | None = ANY_PROJECT,
) -> dict[str, Any]:
    values: dict[str, Any] = {"owner_id": user_id}
    if _project_mode(project) == 2:
        values["project_key"] = project
    if exclude_turn_id is not None:
        values["exclude_turn_id"] = exclude_turn_id
    indexed, others = split
    if dialect == "sqlite":
        match_text = f'owner : "{owner_token(user_id)}" AND content : ({sqlite_match(words)})'
        values["fts_query"] = match_text
        values.update((f"tf_{index}", word) for index, word in enumerate(words))
    elif dialect == "postgresql":
        values["ts_config"] = postgres_config
        values["ts_query"] = postgres_tsquery(words)
        values["ts_owner"] = f"'{postgres_owner_lexeme(user_id)}'"
    else:
        values.update((f"like_{index}", like_pattern(word)) for index, word in enumerate(others))
        if indexed:
            values["ft_query"] = mariadb_boolean(indexed)
    return values


def _prepared(
    dialect: str,
    user_id: str,
    words: tuple[str, ...],
    limit: int,
    exclude_turn_id: str | None,
    postgres_config: str,
    project: str | None = ANY_PROJECT,
) -> tuple[Select[Any], dict[str, Any]]:
    indexed, others = split = _split(dialect, words)
    postgres = dialect == "postgresql"  # one shape whatever the words; one per owner bucket
    shape = _shape(
        dialect,
        bool(indexed),
        0 if postgres else len(others),
        exclude_turn_id is not None,
        max(1, min(limit, MAX_RESULTS)),
        postgres_search_bucket(user_id) if postgres else 0,
        _project_mode(project),
    )
    values = _values(dialect, user_id, words, split, exclude_turn_id, postgres_config, project)
    return shape, values


def statement(
    dialect: str,
    user_id: str,
    words: tuple[str, ...],
    limit: int,
    *,
    exclude_turn_id: str | None = None,
    postgres_config: str = "simple",
) -> Select[Any]:
    """The query for `dialect` (a SQLAlchemy dialect name) with its values bound, for EXPLAIN
    and compile checks; `words` must not be empty. `search` runs the same statement."""
    shape, values = _prepared(dialect, user_id, words, limit, exclude_turn_id, postgres_config)
    return shape.params(values)


def search(
    connection: Connection,
    user_id: str,
    words: tuple[str, ...],
    limit: int,
    *,
    exclude_turn_id: str | None = None,
    postgres_config: str = "simple",
    project: str | None = ANY_PROJECT,
) -> list[SearchHit]:
    """The caller's best-matching messages for `words` (all required), best first; `project`
    narrows them to one project's conversations, or (None) to those outside projects."""
    if not words:
        return []
    shape, values = _prepared(
        connection.dialect.name, user_id, words, limit, exclude_turn_id, postgres_config, project
    )
    if connection.dialect.name != "postgresql":
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
