"""The pure rules of conversation search: query text becomes bounded words with no operator
character, each engine's query is built from those words only, snippets mark matches « »
unambiguously, and the tool's arguments are parsed strictly (the owner is never one)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.dialects import mssql, mysql, postgresql, sqlite
from sqlalchemy.engine import Dialect

from app.agent.search_tool import parse_search_arguments
from app.agent.tools import ArgumentError
from app.conversations.search import statement
from app.conversations.search_text import (
    MAX_QUERY_WORDS,
    SearchQuery,
    mariadb_boolean,
    parse_query,
    postgres_tsquery,
    query_words,
    snippet,
    sqlite_match,
)
from app.offline.model import OfflineModel
from app.offline.wire import ChatRequest, ToolCalls

SEARCH_TOOL = {"type": "function", "function": {"name": "conversation_search"}}


@given(st.text(max_size=400) | st.text(alphabet='ab "*():-', max_size=60))
def test_words_hold_no_syntax_and_are_bounded(text: str) -> None:
    words = query_words(text)
    assert len(words) <= MAX_QUERY_WORDS and len(set(words)) == len(words)
    for word in words:
        assert word and all(char.isalpha() or char.isdecimal() for char in word), word
    query = parse_query(text)
    assert len(query.words) <= MAX_QUERY_WORDS
    for word in query.words:
        assert word and all(char.isalpha() or char.isdecimal() for char in word), word
    if query:
        built = (sqlite_match(query), postgres_tsquery(query), mariadb_boolean(query))
        for spelled in built:
            # Only the query's words and the operators the builders add, nothing from the text.
            assert set(re.findall(r"[^\W_]+", spelled)) <= {*query.words, "OR", "AND"}, spelled
            assert set(re.sub(r"[^\W_]+", "", spelled)) <= set(" \"'*:|&()<->+"), spelled


def test_operators_are_words() -> None:
    assert query_words('NEAR("a" b*) OR x; DROP--') == ("near", "a", "b", "or", "x", "drop")
    query = parse_query("near b*")
    assert sqlite_match(query) == '("near" OR "b")'
    assert postgres_tsquery(query) == "'near' | 'b'"
    assert mariadb_boolean(parse_query("near")) == "near*"


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        pytest.param(
            "What did we decide about the Lisbon trip?",
            SearchQuery(("decide", "lisbon", "trip")),
            id="function-words-left-out",
        ),
        pytest.param("what did we", SearchQuery(("what", "did", "we"), (), True), id="only-them"),
        pytest.param("lisbon tr", SearchQuery(("lisbon", "tr"), (), True), id="typing-a-prefix"),
        pytest.param("lisbon trip ", SearchQuery(("lisbon", "trip")), id="typed-a-word"),
        pytest.param("lisbon t", SearchQuery(("lisbon",)), id="one-letter-being-typed"),
        pytest.param(
            '"Lisbon trip" budget',
            SearchQuery(("budget",), (("lisbon", "trip"),), True),
            id="a-phrase",
        ),
        pytest.param('"the plan" of', SearchQuery((), (("the", "plan"),)), id="phrase-and-stop"),
        pytest.param('"unclosed quote', SearchQuery(("unclosed", "quote"), (), True), id="open"),
        pytest.param("“curly quotes”", SearchQuery((), (("curly", "quotes"),)), id="curly"),
    ],
)
def test_query_text_becomes_terms_phrases_and_a_prefix(text: str, parsed: SearchQuery) -> None:
    """Function words are left out beside other words; a pair of quotes makes a phrase; the
    last word is a prefix only while it is being typed (nothing after it)."""
    assert parse_query(text) == parsed


@pytest.mark.parametrize(
    ("text", "words"),
    [
        pytest.param("½ ① ²", (), id="numerals-only"),
        pytest.param("Ⅻ ⅓ ⁴ ₅ ⑩", (), id="roman-fractions-scripts"),
        pytest.param("x½y", ("x", "y"), id="numeral-splits-a-word"),
        pytest.param("٣ 𝟙 9", ("٣", "𝟙", "9"), id="decimal-digits-are-words"),
        pytest.param("日本語 ünï", ("日本語", "ünï"), id="letters-are-words"),
    ],
)
def test_only_letters_and_decimal_digits_make_words(text: str, words: tuple[str, ...]) -> None:
    """Invariant: a word is a run of letters and decimal digits, the characters every engine's
    parser indexes; text with none (such as `½ ① ²`) has no word, so it searches nothing."""
    assert query_words(text) == words


def test_snippets_mark_matches_and_escape_the_marks_of_the_message() -> None:
    assert snippet("Deploy «now» on Friday", ("deploy",)) == "«Deploy» ‹now› on Friday"
    long = "word " * 100 + "needle here " + "word " * 100
    cut = snippet(long, ("needle",))
    assert cut.startswith("…") and cut.endswith("…") and "«needle»" in cut and len(cut) < 200


def test_tool_arguments_are_strict_and_the_owner_is_not_one() -> None:
    assert parse_search_arguments('{"query": "okapi"}') == ("okapi", 5)
    assert parse_search_arguments('{"query": "okapi", "limit": 2, "user_id": "bob"}') == (
        "okapi",
        2,
    )
    for bad in (
        '{"query": " "}',
        '{"query": 3}',
        '{"query": "x", "limit": 0}',
        '{"query": "x", "limit": true}',
        '{"query": "x", "limit": 11}',
        "[]",
        "nope",
        json.dumps({"query": "x" * 70_000}),
    ):
        assert isinstance(parse_search_arguments(bad), ArgumentError), bad


def test_the_offline_model_searches_on_its_trigger_only_when_offered() -> None:
    def ask(text: str, tools: tuple[dict[str, object], ...]) -> object:
        request = ChatRequest("offline", ({"role": "user", "content": text},), tools, False, False)
        return OfflineModel().reply(request)

    reply = ask("What did we discuss about the billing service?", (SEARCH_TOOL,))
    assert isinstance(reply, ToolCalls)
    assert reply.calls[0].name == "conversation_search"
    assert not isinstance(ask("What did we discuss about billing?", ()), ToolCalls)
    assert not isinstance(ask("Tell me about billing", (SEARCH_TOOL,)), ToolCalls)


@pytest.mark.parametrize(
    "dialect",
    [sqlite.dialect(), postgresql.dialect(), mysql.dialect(), mssql.dialect()],
    ids=lambda d: d.name,
)
def test_every_dialect_compiles_with_the_query_and_owner_bound(dialect: Dialect) -> None:
    """Each strategy compiles (SQL Server included, which no test server runs), and neither the
    words nor the owner are ever spelled into the SQL: they are bound parameters."""
    query = '"zyxwords plugh" zyxwords plugh'
    compiled = statement(dialect.name, "owner-qux-77", query, 10).compile(dialect=dialect)
    sql = str(compiled)
    assert "zyxwords" not in sql and "plugh" not in sql and "owner-qux-77" not in sql
    assert any("zyxwords" in str(value) for value in compiled.params.values())
