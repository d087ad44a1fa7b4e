"""Pure text rules of conversation search: how any query text becomes a `SearchQuery` (optional
words, required quoted phrases, the last word as a prefix), how each engine's query is spelled
from those words alone, and how a matched message becomes a marked snippet.

Search syntax in a query (`*`, `NEAR`, `AND`/`OR`/`NOT`, parentheses, SQL) is never passed to an
engine: the query is cut into words (runs of letters and digits), and each engine's query is
built from those words, which hold no operator character, and bound as a parameter. The only
syntax read is a pair of double quotes, which makes the words between them a phrase.
"""

from __future__ import annotations

import math
import re
import unicodedata
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


@dataclass(frozen=True)
class SearchQuery:
    """What a query asks for. `terms`: words any of which may match (function words left out
    when the query has other words), ranked by how rare and how frequent they are; `phrases`:
    quoted runs of words, each required in that order; `prefix`: the last term is the start of
    a word still being typed (the query ends right after it)."""

    terms: tuple[str, ...] = ()
    phrases: tuple[tuple[str, ...], ...] = ()
    prefix: bool = False

    @property
    def words(self) -> tuple[str, ...]:
        """Every word of the query (terms, then the phrases' words): what a snippet marks."""
        seen = list(self.terms)
        seen.extend(word for phrase in self.phrases for word in phrase if word not in seen)
        return tuple(seen)

    @property
    def parts(self) -> tuple[str | tuple[str, ...], ...]:
        """What the rank weighs, one by one: each term, then each phrase."""
        return (*self.terms, *self.phrases)

    def __bool__(self) -> bool:
        return bool(self.terms or self.phrases)


# English function words: left out of a query that has other words, so that "what did we
# decide about the trip" ranks by "decide" and "trip". A query made only of them keeps them.
_STOPWORD_TEXT = """a about above after again against all am an and any are aren as at be
    because been before being below between both but by can could couldn did didn do does doesn
    doing don down during
    each few for from further had hadn has hasn have haven having he her here hers herself him
    himself his how i if in into is isn it its itself just let ll me more most much my myself no
    nor not now of off on once only or other our ours ourselves out over own re same she should
    so some such t than that the their theirs them themselves then there these they this those
    through to too under until up ve very was wasn we were weren what when where which while who
    whom why will with won would you your yours yourself yourselves s d m o y ago also anything
    something tell told remember recall said say says talk talked discuss discussed mention
    mentioned us ever"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"'})  # “ ” „
MAX_PHRASES = 4
MIN_PREFIX_CHARS = 2  # a shorter last word being typed is left out (it matches too much)


def _segment_words(text: str) -> list[tuple[str, int]]:
    """The lower-case words of `text` and where each ends."""
    return [(text[start:end].lower()[:MAX_WORD_CHARS], end) for start, end in word_spans(text)]


def parse_query(text: str) -> SearchQuery:
    """A query's words, phrases and prefix (module docstring: never syntax but quotes)."""
    text = text[:MAX_QUERY_CHARS].translate(_QUOTES)
    pieces = text.split('"')
    terms: list[str] = []
    phrases: list[tuple[str, ...]] = []
    last_end, last_in_phrase, count = -1, False, 0
    for index, piece in enumerate(pieces):
        # Odd pieces lie between a pair of quotes; an unclosed quote's words are plain words.
        quoted = index % 2 == 1 and index < len(pieces) - 1
        offset = sum(len(part) + 1 for part in pieces[:index])
        found = _segment_words(piece)
        if not found:
            continue
        last_end, last_in_phrase = offset + found[-1][1], quoted
        if quoted and len(phrases) < MAX_PHRASES:
            words = tuple(word for word, _end in found)[: MAX_QUERY_WORDS - count]
            if len(words) == 1 and words[0] not in terms:
                terms.append(words[0])  # one quoted word: a word like any other, not a prefix
                last_in_phrase = True
            elif len(words) > 1 and words not in phrases:
                phrases.append(words)
            count += len(words)
            continue
        for word, _end in found:
            if count < MAX_QUERY_WORDS and word not in terms:
                terms.append(word)
                count += 1
    prefix = bool(terms) and not last_in_phrase and last_end == len(text)
    content = [word for word in terms if word not in STOPWORDS]
    if content and (phrases or len(content) < len(terms)):
        if prefix and terms[-1] not in content:
            prefix = False  # the word being typed was a function word: it is left out
        terms = content
    elif not content and phrases:
        terms, prefix = [], False  # only function words beside a phrase: the phrase decides
    if prefix and len(terms[-1]) < MIN_PREFIX_CHARS:
        # A single letter being typed matches too much as a prefix: beside other words it is
        # left out; alone it is searched as a word.
        terms, prefix = (terms[:-1] if len(terms) > 1 or phrases else terms), False
    return SearchQuery(tuple(terms), tuple(phrases), prefix)


def fold(word: str) -> str:
    """A word as SQLite's index compares it: lower case, diacritics removed (unicode61's
    remove_diacritics 2 for the scripts that carry them)."""
    word = word.lower()
    if word.isascii():
        return word
    return "".join(
        char for char in unicodedata.normalize("NFKD", word) if not unicodedata.combining(char)
    )


def _tokens(content: str) -> list[str]:
    if content.isascii():  # the common case in one C call: the same words as the loop below
        return _WORD.findall(content.lower())
    return [fold(content[start:end]) for start, end in word_spans(content)]


def _occurrences(tokens: list[str], part: str | tuple[str, ...], prefix: bool) -> int:
    if isinstance(part, tuple):
        size = len(part)
        return sum(
            1 for at in range(len(tokens) - size + 1) if tuple(tokens[at : at + size]) == part
        )
    if prefix:  # the words that start with it, counted in C (no word holds a space)
        return (" " + " ".join(tokens)).count(" " + part)
    return tokens.count(part)


def text_bm25(
    contents: list[str], query: SearchQuery, total: int, k1: float, b: float
) -> list[float]:
    """BM25 of each text for the query's parts (each term, the last one as a prefix when
    typed so; each phrase), with Lucene's IDF ln(1 + (N - n + 0.5) / (n + 0.5)), N = `total`
    and n the texts holding the part; lengths in words, normalized by the texts' average."""
    last = len(query.terms) - 1
    parts = [
        (
            fold(part) if isinstance(part, str) else tuple(fold(word) for word in part),
            query.prefix and index == last,
        )
        for index, part in enumerate(query.parts)
    ]
    tokenized = [_tokens(content) for content in contents]
    counts = [
        [_occurrences(tokens, part, prefix) for part, prefix in parts] for tokens in tokenized
    ]
    average = max(1.0, sum(len(tokens) for tokens in tokenized) / max(1, len(tokenized)))
    idfs = []
    for index in range(len(parts)):
        held = sum(1 for row in counts if row[index])
        idfs.append(math.log(1 + (total - held + 0.5) / (held + 0.5)))
    scores = []
    for tokens, row in zip(tokenized, counts, strict=True):
        norm = k1 * (1 - b + b * len(tokens) / average)
        scores.append(
            sum(idf * tf * (k1 + 1) / (tf + norm) for idf, tf in zip(idfs, row, strict=True))
        )
    return scores


def _fts_term(word: str, prefix: bool) -> str:
    return f'"{word}"' + ("*" if prefix else "")


def sqlite_match(query: SearchQuery) -> str:
    """FTS5: the phrases required (AND), the terms and phrases any of which may match (OR, so
    that bm25() weighs each one); only the last term may be a prefix."""
    last = len(query.terms) - 1
    terms = [_fts_term(word, query.prefix and i == last) for i, word in enumerate(query.terms)]
    phrases = ['"' + " ".join(phrase) + '"' for phrase in query.phrases]
    optional = "(" + " OR ".join([*phrases, *terms]) + ")"
    if not phrases:
        return optional
    required = " AND ".join(phrases)
    return f"{required} AND {optional}" if terms else required


def _ts_part(part: str | tuple[str, ...], prefix: bool) -> str:
    if isinstance(part, tuple):
        return "(" + " <-> ".join(f"'{word}'" for word in part) + ")"
    return f"'{part}'" + (":*" if prefix else "")


def postgres_parts(query: SearchQuery) -> list[str]:
    """`to_tsquery` text of each part the rank weighs (`SearchQuery.parts`), one by one."""
    last = len(query.terms) - 1
    return [
        _ts_part(part, query.prefix and index == last) for index, part in enumerate(query.parts)
    ]


def postgres_tsquery(query: SearchQuery) -> str:
    """`to_tsquery` text of what a message must match: every phrase, and (without one) any
    term."""
    parts = postgres_parts(query)
    if query.phrases:
        return " & ".join(parts[len(query.terms) :])
    return " | ".join(parts)


def mariadb_indexed(words: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(
        word for word in words if len(word) >= MARIADB_MIN_WORD and word not in MARIADB_STOPWORDS
    )


def mariadb_boolean(query: SearchQuery) -> str:
    """BOOLEAN MODE: the indexable terms optional (any may match; InnoDB weighs each by its
    rarity), the last one a prefix if typed so; phrases of indexable words required. Empty
    when nothing of the query can go through the index."""
    last = len(query.terms) - 1
    parts = [
        word + ("*" if query.prefix and index == last else "")
        for index, word in enumerate(query.terms)
        if mariadb_indexed((word,))
    ]
    parts.extend('+"' + " ".join(phrase) + '"' for phrase in mariadb_phrases(query)[0])
    return " ".join(parts)


def mariadb_phrases(
    query: SearchQuery,
) -> tuple[tuple[tuple[str, ...], ...], tuple[tuple[str, ...], ...]]:
    """The phrases InnoDB can match (every word indexable), and the others (matched by LIKE)."""
    indexed = tuple(phrase for phrase in query.phrases if mariadb_indexed(phrase) == phrase)
    return indexed, tuple(phrase for phrase in query.phrases if phrase not in indexed)


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
