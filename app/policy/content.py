"""The one content policy for memory entries: how text is normalized, and what an entry may
not contain. Every write (the model's tool and the REST API, both through
`rules.apply_operations`) and every load into the prompt (`render`) applies this module, so
an entry is judged the same way wherever it comes from and whenever it was stored.

The checks run in order, on the normalized entry:
1. characters: no control, format, private-use, unassigned or noncharacter code points, no
   line or paragraph separators; only newline and the joiners and selectors that emoji and
   some scripts need (`characters`);
2. the `§` delimiter, also disguised (`markers`);
3. the reserved tags <persistent_memory_data> and </persistent_memory_data>, also disguised;
4. threats: instructions, exfiltration, secrets (`scanning`, `secrets`).
Messages name the reason and the code point, never the entry's text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import icu

from app.policy import characters, markers, scanning

Code = Literal["forbidden_content", "unsafe_content"]

_NFC = icu.Normalizer2.getNFCInstance()
_CARRIAGE_RETURNS = re.compile("\r\n?")


@dataclass(frozen=True)
class Violation:
    """Why an entry is refused: a stable code and a message written for the model."""

    code: Code
    category: str
    message: str


def normalize(text: str) -> str:
    """The stored form: CRLF and CR become LF, then NFC, then outer whitespace is removed.
    Lengths are counted on this form, so transport encoding cannot change them."""
    return str(_NFC.normalize(_CARRIAGE_RETURNS.sub("\n", text))).strip()


def _characters(entry: str) -> Violation | None:
    found = characters.first_forbidden(entry)
    if found is None:
        return None
    if not found.hides_text:
        return Violation(
            "forbidden_content",
            "character",
            f"The entry contains {found.kind} ({found.label}); "
            "only visible text and newlines are allowed.",
        )
    return Violation(
        "unsafe_content",
        "invisible_unicode",
        f"Blocked (invisible_unicode): it contains {found.kind} ({found.label}). "
        "Memory holds visible plain text only.",
    )


def _delimiter(entry: str) -> Violation | None:
    if not markers.has_delimiter_line(entry):
        return None
    return Violation(
        "forbidden_content",
        "delimiter",
        "The entry contains the entry delimiter (a line holding only '§', or a look-alike): "
        "write one fact per entry.",
    )


def _reserved_tag(entry: str) -> Violation | None:
    if not markers.has_reserved_tag(entry):
        return None
    return Violation(
        "forbidden_content",
        "reserved_tag",
        "The entry contains the reserved tag <persistent_memory_data> (or a disguised form of "
        "it), which delimits memory in the prompt.",
    )


def _threats(entry: str) -> Violation | None:
    threat = scanning.scan(entry)
    if threat is None:
        return None
    return Violation(
        "unsafe_content",
        threat.category,
        f"Blocked ({threat.category}): {threat.reason}. "
        "Memory holds plain facts, never instructions, secrets or commands.",
    )


CHECKS = (_characters, _delimiter, _reserved_tag, _threats)


def check(entry: str) -> Violation | None:
    """The first rule a normalized entry breaks, or None when it may be stored and shown."""
    for step in CHECKS:
        found = step(entry)
        if found is not None:
            return found
    return None


def is_acceptable(stored: str) -> bool:
    """Whether a stored entry may go into the prompt: already in normal form, and clean."""
    return normalize(stored) == stored and check(stored) is None
