"""Pure text rules of conversation search: how any query text becomes words, how each engine's
query is spelled from those words alone, and how a matched message becomes a marked snippet.

Search syntax in a query (quotes, `*`, `NEAR`, `AND`/`OR`/`NOT`, parentheses, SQL) is never
passed to an engine: the query is cut into words (runs of letters and digits), and each engine's
query is built from those words, which hold no operator character, and bound as a parameter.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

MAX_QUERY_CHARS = 200  # longer text is cut here (still searched), never refused
MAX_QUERY_WORDS = 12
MAX_WORD_CHARS = 64
SNIPPET_CHARS = 160
# The marking of a matched word in a snippet; the same characters in the message itself are
# shown as single guillemets, so a marker in a snippet always means a match.
MARK_OPEN, MARK_CLOSE = "\u00ab", "\u00bb"  # « »
_ESCAPED_MARKS = str.maketrans({MARK_OPEN: "\u2039", MARK_CLOSE: "\u203a"})  # ‹ ›
ELLIPSIS = "\u2026"


def query_problem(query: str) -> str | None:
    """Why a query is not text to search (NUL, an unpaired surrogate), or None: refused with
    its reason rather than searched for its other words."""
    if "\x00" in query:
        return "query must not contain the NUL character (U+0000)."
    if any("\ud800" <= character <= "\udfff" for character in query):
        return "query must be valid Unicode text (no unpaired surrogates)."
    return None


# A candidate run of word characters; `word_spans` keeps only its letters and decimal digits.
# Other "numbers" (½, ①, ², Roman numerals) are not words to any engine: PostgreSQL's parser
# drops them, and a query made of them alone matched every message there.
_WORD = re.compile(r"[^\W_]+")
# InnoDB's FULLTEXT index leaves out words shorter than innodb_ft_min_token_size (3) and its
# default stopwords (INFORMATION_SCHEMA.INNODB_FT_DEFAULT_STOPWORD); a query for one of them
# would match nothing through the index.
MARIADB_MIN_WORD = 3
MARIADB_STOPWORDS = frozenset(
    [
        "a",
        "about",
        "an",
        "are",
        "as",
        "at",
        "be",
        "by",
        "com",
        "de",
        "en",
        "for",
        "from",
        "how",
        "i",
        "in",
        "is",
        "it",
        "la",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "what",
        "when",
        "where",
        "who",
        "will",
        "with",
        "und",
        "www",
    ]
)


def word_spans(text: str, begin: int = 0) -> Iterator[tuple[int, int]]:
    """Where the words of `text` are (from `begin` on): runs of letters and decimal digits."""
    for match in _WORD.finditer(text, begin):
        run = match.group()
        if run.isascii():  # ASCII letters and digits only: the common case, whole
            yield match.span()
            continue
        start: int | None = None
        for offset, char in enumerate(run):
            if char.isalpha() or char.isdecimal():
                start = offset if start is None else start
            elif start is not None:
                yield match.start() + start, match.start() + offset
                start = None
        if start is not None:
            yield match.start() + start, match.end()


def query_words(text: str) -> tuple[str, ...]:
    """The distinct lower-case words of a query, in order, bounded in number and length. A
    query with none (only symbols, punctuation or numerals such as ½) finds nothing."""
    words: list[str] = []
    text = text[:MAX_QUERY_CHARS]
    for start, end in word_spans(text):
        word = text[start:end].lower()[:MAX_WORD_CHARS]
        if word not in words:
            words.append(word)
        if len(words) == MAX_QUERY_WORDS:
            break
    return tuple(words)


def sqlite_match(words: tuple[str, ...]) -> str:
    """FTS5: every word as a quoted prefix term, all required (implicit AND)."""
    return " ".join(f'"{word}"*' for word in words)


def postgres_tsquery(words: tuple[str, ...]) -> str:
    """`to_tsquery` text: every word quoted, as a prefix, all required."""
    return " & ".join(f"'{word}':*" for word in words)


def mariadb_indexed(words: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(
        word for word in words if len(word) >= MARIADB_MIN_WORD and word not in MARIADB_STOPWORDS
    )


def mariadb_boolean(words: tuple[str, ...]) -> str:
    """BOOLEAN MODE: every indexable word required, as a prefix."""
    return " ".join(f"+{word}*" for word in words)


def like_pattern(word: str) -> str:
    """A LIKE pattern for `word` anywhere (ESCAPE '\\'); words hold no wildcard, but be sure."""
    escaped = word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


@dataclass(frozen=True)
class _Hit:
    start: int
    end: int


def _hits(content: str, words: tuple[str, ...], *, start: int = 0) -> Iterator[_Hit]:
    """Words of `content` from `start` on that start with a query word (the engines match
    prefixes), in order, found as they are asked for."""
    for begin, end in word_spans(content, start):
        if content[begin:end].lower().startswith(words):
            yield _Hit(begin, end)


def snippet(content: str, words: tuple[str, ...], size: int = SNIPPET_CHARS) -> str:
    """About `size` characters of `content` around its first match, matches marked « », cuts
    shown as an ellipsis, whitespace collapsed. Without a match (an engine that folds accents
    or stems), the start of the message. Reads the message up to its first match and then the
    window only."""
    first_hit = next(_hits(content, words), None) if words else None
    first = first_hit.start if first_hit else 0
    start = max(0, first - size // 3)
    end = min(len(content), start + size)
    start = max(0, min(start, end - size))
    hits: list[_Hit] = []
    if first_hit is not None:
        for hit in _hits(content, words, start=start):
            if hit.start >= end:
                break
            hits.append(hit)
    pieces: list[str] = [ELLIPSIS] if start > 0 else []
    cursor = start
    for hit in hits:
        if hit.start < start or hit.end > end:
            continue
        pieces.append(_plain(content[cursor : hit.start]))
        pieces.append(MARK_OPEN + _plain(content[hit.start : hit.end]) + MARK_CLOSE)
        cursor = hit.end
    pieces.append(_plain(content[cursor:end]))
    if end < len(content):
        pieces.append(ELLIPSIS)
    return "".join(pieces).strip()


def _plain(text: str) -> str:
    return re.sub(r"\s+", " ", text.translate(_ESCAPED_MARKS))


def unmarked(snippet_text: str) -> str:
    """A snippet without its match marks: what the model reads. Marks are for the person's
    search view (the web client highlights them); a model given them copies them into its
    answer. Marks in the stored text were already turned into ‹ › by `snippet`."""
    return snippet_text.replace(MARK_OPEN, "").replace(MARK_CLOSE, "")


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + ELLIPSIS
