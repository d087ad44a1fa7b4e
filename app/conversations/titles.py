"""Conversation titles: a short one made from the person's first message, and the rules a
title the person types must meet.

The title is a heuristic, not a model call, whatever model answers: it costs nothing, adds no
latency before the first text, sends nothing more to a model, is the same on every run (the
offline model's conversations get the same title every time) and works while the model is down.
The person can rename a conversation (`PATCH /v1/conversations/{id}`).
"""

from __future__ import annotations

import re
import unicodedata

DEFAULT_TITLE = "New conversation"
MAX_TITLE_CHARS = 200  # the column's size
TITLE_WORDS = 8
TITLE_CHARS = 60
# The title comes from the message's start: a longer message is read this far only, so a
# title costs the same for a message of any length.
TITLE_SOURCE_CHARS = 2_000

# Openers that say how the person asks, not what about: "Please can you tell me how ..." is
# titled by what follows. Applied repeatedly, longest first, case-insensitively.
_OPENERS = re.compile(
    r"(?:hi|hello|hey|ok(?:ay)?|so|please|pls|thanks|thank you|"
    r"(?:can|could|would|will) you(?: please)?|i (?:want|need|would like) (?:you )?to|"
    r"i'd like (?:you )?to|help me(?: to)?|tell me|explain(?: to me)?|"
    r"(?:please )?remember(?: that)?|let's|let us)\b[\s,!.:;-]*",
    re.I,
)
# A title cut after a few words should not end on a word that leads into the cut.
_DANGLING = frozenset(
    {"a", "an", "the", "in", "on", "at", "to", "of", "for", "and", "or", "with", "by", "from"}
    | {"my", "your", "our", "their", "is", "are", "be", "as"}
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s|\n")
_TRAILING = ".,;:!?-–—\"'()[]"


def title_from_message(message: str) -> str:
    """A few words of the first sentence of `message`, openers dropped, first letter capital;
    DEFAULT_TITLE when nothing is left."""
    text = message[:TITLE_SOURCE_CHARS].strip()
    start = 0
    # Openers first: "Hi! Can you ..." is titled by what follows the greeting. Matched in place
    # (a copy of the rest per opener made "hi hi hi …" quadratic in the message).
    while (opener := _OPENERS.match(text, start)) is not None and opener.end() > start:
        start = opener.end()
        while start < len(text) and text[start].isspace():
            start += 1
    text = text[start:]
    first = _SENTENCE_END.split(text, maxsplit=1)[0]
    all_words = first.split()
    words = all_words[:TITLE_WORDS]
    if len(all_words) > TITLE_WORDS:
        while len(words) > 1 and words[-1].lower() in _DANGLING:
            words.pop()
    title = " ".join(words)
    if len(title) > TITLE_CHARS:
        title = title[:TITLE_CHARS].rsplit(" ", 1)[0] or title[:TITLE_CHARS]
    title = title.strip(_TRAILING + " ")
    if not title:
        return DEFAULT_TITLE
    return title[0].upper() + title[1:]


class TitleError(ValueError):
    """Why a title the person typed is refused."""


def checked_title(title: str) -> str:
    """The title as stored (whitespace collapsed), or TitleError: 1..MAX_TITLE_CHARS
    characters of text without control characters."""
    if any(unicodedata.category(char) == "Cc" for char in title):
        raise TitleError("title must not contain control characters (line breaks, NUL, ...).")
    cleaned = " ".join(title.split())
    if not cleaned:
        raise TitleError("title must contain text.")
    if len(cleaned) > MAX_TITLE_CHARS:
        raise TitleError(f"title holds {len(cleaned)} characters; at most {MAX_TITLE_CHARS}.")
    try:
        cleaned.encode("utf-8")
    except UnicodeEncodeError:
        raise TitleError("title must be valid Unicode text.") from None
    return cleaned
