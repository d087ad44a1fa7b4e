"""Conversation titles: the heuristic always gives a short, one-line, non-empty title, the same
for the same message; a typed title is stored collapsed or refused with a reason, never cut."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.conversations.titles import (
    DEFAULT_TITLE,
    MAX_TITLE_CHARS,
    TITLE_CHARS,
    TitleError,
    checked_title,
    title_from_message,
)


@given(st.text(max_size=500))
def test_a_made_title_is_short_one_line_and_never_empty(message: str) -> None:
    """Whatever the message: at most TITLE_CHARS characters, no line break, no padding, text."""
    title = title_from_message(message)
    assert 0 < len(title) <= TITLE_CHARS
    assert "\n" not in title and title == title.strip()
    assert title == title_from_message(message)  # deterministic


@pytest.mark.parametrize(
    ("message", "title"),
    [
        ("Could you please explain how DNS works?", "How DNS works"),
        ("hey! okay so let's write a haiku", "Write a haiku"),
        ("   ", DEFAULT_TITLE),
        ("thanks", DEFAULT_TITLE),
        ("deploy the api", "Deploy the api"),
        ("How do I read a CSV file in Python and sum one column?", "How do I read a CSV file"),
    ],
    ids=[
        "polite-opener",
        "chained-openers",
        "blank",
        "only-an-opener",
        "capitalised",
        "no-dangling-word",
    ],
)
def test_openers_are_dropped(message: str, title: str) -> None:
    assert title_from_message(message) == title


@given(st.text(max_size=300))
def test_a_typed_title_is_stored_collapsed_or_refused(typed: str) -> None:
    """Accepted: whitespace collapsed, 1..MAX_TITLE_CHARS, no control characters; otherwise a
    TitleError (the title is never silently cut or altered beyond its spaces)."""
    try:
        stored = checked_title(typed)
    except TitleError:
        collapsed = " ".join(typed.split())
        assert (
            not collapsed
            or len(collapsed) > MAX_TITLE_CHARS
            or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in typed)
            or any(0xD800 <= ord(c) <= 0xDFFF for c in typed)
        )
        return
    assert stored == " ".join(typed.split()) and 0 < len(stored) <= MAX_TITLE_CHARS
