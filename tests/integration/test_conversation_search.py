"""Conversation search on SQLite, PostgreSQL and MariaDB, through the service: any query text is
searched as words (never an error), only the owner's messages are found, best match first, a
deleted conversation is gone from the index, one turn can be left out."""

from __future__ import annotations

import asyncio
import itertools
import string
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from app.conversations import search
from app.conversations.search_text import MARK_CLOSE, MARK_OPEN, SearchQuery, query_words
from app.conversations.service import ConversationService
from app.db.schema import (
    POSTGRES_BUCKET_SQL,
    SEARCH_FTS_TABLE,
    conversations,
    postgres_owner_lexeme,
    postgres_search_bucket,
)
from app.identity.tokens import subject_problem

CRAFTED = [
    '"',
    "'",
    "*",
    "NEAR",
    "NEAR(alpha beta)",
    "alpha AND NOT beta",
    "alpha OR 1=1",
    "(((",
    ")",
    "alpha*",
    "-alpha",
    "+alpha",
    "'; DROP TABLE amem_conversations; --",
    "\x00alpha",
    "alpha\x01\x1fbeta",
    "%",
    "_",
    "\\",
    "content:alpha",
    "{alpha beta}",
    "^alpha",
    "alpha:*",
    "!alpha & beta | gamma",
    "<->",
    "@@",
    "x" * 5000,
    "ünïcödé 日本語 🙂",
    "a",
    "is the",
]


def store(service: ConversationService, user: str, messages: list[str]) -> str:
    conversation = asyncio.run(
        service.create(user, "0" * 8 + "-0000-4000-8000-" + "0" * 12, messages[0])
    )
    assert conversation is not None
    for message in messages[1:]:
        assert asyncio.run(
            service.append(
                conversation, "1" * 8 + "-0000-4000-8000-" + "1" * 12, "assistant", message
            )
        )
    return conversation


def find(service: ConversationService, user: str, query: str, limit: int = 10) -> list[str]:
    return [result.snippet for result in asyncio.run(service.search(user, query, limit))]


def test_words_are_found_ranked_and_marked(engine: Engine) -> None:
    """Any word may match (the last one as a prefix), the message holding more of them ranks
    first, and the snippet marks the matched words with « »."""
    service = ConversationService(engine)
    store(
        service,
        "alice",
        [
            "We chose PostgreSQL for the billing service.",
            "The billing service deploys on Fridays; billing reports go out on Mondays.",
            "Lunch was pasta.",
        ],
    )
    found = find(service, "alice", "billing")
    assert len(found) == 2
    assert f"{MARK_OPEN}billing{MARK_CLOSE}" in found[0]
    assert find(service, "alice", "BILLING deploy")[0] == (
        f"The {MARK_OPEN}billing{MARK_CLOSE} service {MARK_OPEN}deploys{MARK_CLOSE} on Fridays; "
        f"{MARK_OPEN}billing{MARK_CLOSE} reports go out on Mondays."
    )
    assert find(service, "alice", "pasta") == [f"Lunch was {MARK_OPEN}pasta{MARK_CLOSE}."]
    assert find(service, "alice", "sushi") == []


def test_a_message_that_repeats_the_words_ranks_first(engine: Engine) -> None:
    """Every engine ranks by how often the words occur: of messages of about the same length,
    the one that says the word three times comes first, whichever is newer."""
    service = ConversationService(engine)
    store(
        service,
        "alice",
        [
            "zebra zebra zebra fig kiwi lime",
            "zebra apple pear plum fig kiwi",
            "apple pear plum fig kiwi lime",
            "apple pear plum fig kiwi melon",
        ],
    )
    store(service, "alice", ["apple pear plum fig kiwi lime", "zebra apple pear plum fig kiwi"])
    found = find(service, "alice", "zebra")
    assert len(found) == 3
    assert found[0].count(f"{MARK_OPEN}zebra{MARK_CLOSE}") == 3


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    bodies=st.lists(
        st.lists(
            st.sampled_from(["Ibis", "ibis", "ibises", "owl", "Owl", "heron", "xylem"]),
            min_size=1,
            max_size=12,
        ).map(" ".join),
        min_size=2,
        max_size=8,
    ),
    query=st.sampled_from(["ibis", "owl", "ibis owl", "ibis heron", "ibis heron owl", "ibi"]),
)
def test_results_are_the_messages_holding_any_word(
    engine: Engine, bodies: list[str], query: str
) -> None:
    """On every dialect the results are exactly the messages holding any of the query's words
    (the last one as a prefix of a word, the others whole), with scores best first."""
    service = ConversationService(engine)
    user = f"ranker-{uuid.uuid4()}"
    store(service, user, bodies)
    words = query_words(query)
    results = asyncio.run(service.search(user, query, 50))

    def holds(body: str) -> bool:
        tokens = body.lower().split()
        return any(word in tokens for word in words[:-1]) or any(
            token.startswith(words[-1]) for token in tokens
        )

    assert sorted(snippet_text(result.snippet) for result in results) == sorted(
        body for body in bodies if holds(body)
    )
    scores = [result.score for result in results]
    assert all(a >= b for a, b in itertools.pairwise(scores)), scores


def snippet_text(marked: str) -> str:
    return marked.replace(MARK_OPEN, "").replace(MARK_CLOSE, "")


def test_crafted_queries_never_fail_nor_cross_users(engine: Engine) -> None:
    """Search syntax, SQL and control characters are words: no error, only alice's rows."""
    service = ConversationService(engine)
    store(service, "alice", ["alpha beta gamma from alice"])
    store(service, "bob", ["alpha beta gamma from bob, and NEAR AND OR NOT x a is the"])
    for query in CRAFTED:
        for result in asyncio.run(service.search("alice", query, 50)):
            assert "bob" not in result.snippet, query
    assert len(find(service, "alice", "NEAR(alpha beta)")) == 1  # any word: alpha, beta
    assert find(service, "alice", "NEAR OR NOT") == []  # these words are not alice's
    assert len(find(service, "alice", "alpha*")) == 1


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    query=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300)
    | st.text(alphabet=string.punctuation + string.ascii_letters + " ", max_size=60)
)
def test_any_query_text_is_valid_and_scoped(engine: Engine, query: str) -> None:
    """Arbitrary text never raises and never returns another user's message, even when that
    user's message is exactly the query text."""
    service = ConversationService(engine)
    if not asyncio.run(service.list_for("carol")):
        store(service, "carol", ["carol only", "alpha beta gamma delta"])
    store(service, "dave", ["dave only", query.replace("\x00", "") or "empty"])
    results = asyncio.run(service.search("carol", query, 50))
    assert all(result.title == "Carol only" for result in results)  # its title, from "carol only"


@pytest.mark.parametrize("query", ["½ ① ²", "Ⅻ ⅓", "²", "… — ·"], ids=lambda q: q)
def test_text_without_a_searchable_word_finds_nothing(engine: Engine, query: str) -> None:
    """Invariant: a query with no searchable word finds no message, on every dialect (on
    PostgreSQL such text once made an empty tsquery, and the owner's lexeme alone matched
    every message the caller owns)."""
    service = ConversationService(engine)
    store(service, "alice", ["alpha ½ ① ² Ⅻ ⅓ beta", "gamma"])
    assert find(service, "alice", query) == []


def test_words_the_engine_drops_find_nothing(engine: Engine) -> None:
    """The engine's own guard, below the word rules: words its parser does not index (given
    to it directly) match no message, rather than all of them."""
    store(ConversationService(engine), "alice", ["alpha beta", "gamma"])
    with engine.connect() as connection:
        assert search.search(connection, "alice", SearchQuery(("½", "①")), 10) == []


def test_short_words_and_stopwords_are_found_too(engine: Engine) -> None:
    """Words below MariaDB's FULLTEXT token size or in its stopword list still match (LIKE)."""
    service = ConversationService(engine)
    store(service, "alice", ["is it ok to go by bus"])
    store(service, "bob", ["go by bus is ok"])
    assert len(find(service, "alice", "go")) == 1
    assert len(find(service, "alice", "bus ok")) == 1


def test_deleting_a_conversation_removes_it_from_the_index(engine: Engine) -> None:
    service = ConversationService(engine)
    conversation = store(service, "alice", ["the zeppelin plan"])
    assert find(service, "alice", "zeppelin")
    assert asyncio.run(service.delete("alice", conversation))
    assert find(service, "alice", "zeppelin") == []


def test_one_turn_can_be_left_out(engine: Engine) -> None:
    service = ConversationService(engine)
    store(service, "alice", ["walrus question", "walrus answer"])
    turn = "1" * 8 + "-0000-4000-8000-" + "1" * 12
    left = asyncio.run(service.search("alice", "walrus", 10, exclude_turn_id=turn))
    assert [result.role for result in left] == ["user"]


def test_deleting_conversation_rows_directly_keeps_the_index_whole(engine: Engine) -> None:
    """A conversation deleted without its messages first (the cascade path, an operator's SQL)
    leaves nothing behind in the index, and SQLite's FTS5 integrity check still passes."""
    service = ConversationService(engine)
    store(service, "alice", ["the ibex expedition", "ibex again"])
    kept = store(service, "alice", ["the ibex notes stay"])
    with engine.begin() as connection:
        connection.execute(conversations.delete().where(conversations.c.id != kept))
    assert find(service, "alice", "ibex") == ["the «ibex» notes stay"]
    if engine.dialect.name == "sqlite":
        with engine.begin() as connection:
            connection.execute(
                text(
                    f"INSERT INTO {SEARCH_FTS_TABLE}({SEARCH_FTS_TABLE}) VALUES ('integrity-check')"
                )
            )


SUBJECTS = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=128
).filter(lambda subject: subject_problem(subject) is None)


@pytest.mark.postgres
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(subject=SUBJECTS)
def test_every_owner_searches_the_bucket_its_messages_are_in(pg: Engine, subject: str) -> None:
    """PostgreSQL's owner bucket as the search computes it (in Python) is the one the trigger
    stores with each message (in SQL), for any subject a token may carry: otherwise that
    owner would find nothing. And the owner finds the message."""
    with pg.connect() as connection:
        stored = connection.execute(
            text(f"SELECT {POSTGRES_BUCKET_SQL.replace('user_id', ':owner')}"), {"owner": subject}
        ).scalar_one()
    assert stored == postgres_search_bucket(subject)
    service = ConversationService(pg)
    if not find(service, subject, "wombat"):
        store(service, subject, ["a wombat for this owner"])
    assert find(service, subject, "wombat") == ["a «wombat» for this owner"]


@pytest.mark.postgres
def test_messages_that_spell_an_owner_lexeme_take_nothing_from_that_owner(pg: Engine) -> None:
    """On PostgreSQL the owner's lexeme shares the tsvector with the message's words, so another
    user (in the same owner bucket) can write it into their own messages. Such messages never
    reach the owner, and never take the owner's place among the candidates either."""
    alice = "alice"
    bob = next(
        f"bob-{n}"
        for n in itertools.count()
        if postgres_search_bucket(f"bob-{n}") == postgres_search_bucket(alice)
    )
    service = ConversationService(pg)
    store(service, alice, ["the platypus itinerary"])
    spoof = f"{postgres_owner_lexeme(alice)} " + "platypus " * 20
    store(service, bob, [spoof] * 15)
    assert find(service, alice, "platypus") == ["the «platypus» itinerary"]
    assert len(find(service, bob, "platypus", 50)) == 15
