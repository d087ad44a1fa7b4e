"""Which code points a memory entry may hold: visible text, newlines, and the few invisible
characters that real writing needs, each only where it does its job.

Everything a reader cannot see is a place to hide an instruction from the user who reviews
memory (Unicode tag characters can spell a whole sentence that models read and people do not).
So control (Cc) and format (Cf) characters, private-use, unassigned and noncharacter code
points, surrogates, line and paragraph separators, and every Default_Ignorable_Code_Point are
refused, except in these contexts:

- ZERO WIDTH JOINER inside an emoji ZWJ sequence (UTS #51: pictograph, optional skin tone or
  VS16, ZWJ, pictograph), or after a virama, where Indic scripts use it (RFC 5892 A.2);
- ZERO WIDTH NON-JOINER after a virama or between joining letters (RFC 5892 A.1: Persian and
  other Arabic-script languages write it in everyday words);
- VS15/VS16 once, right after a character that has an emoji form (text or emoji presentation,
  keycaps); an ideographic variation selector once, right after an ideograph; a Mongolian free
  variation selector once, right after a Mongolian letter;
- tag characters only as part of an RGI emoji tag sequence (the flags of England, Scotland and
  Wales). Any other tag sequence is refused: it renders as a plain black flag while its tags
  still spell text for a model.

The character data is ICU's (Unicode properties and the RGI emoji sets), never a local table.
"""

from __future__ import annotations

from dataclasses import dataclass

import icu

ZWJ = "\u200d"
ZWNJ = "\u200c"
EMOJI_VARIATION_SELECTORS = frozenset("\ufe0e\ufe0f")
VIRAMA_COMBINING_CLASS = 9


def _set(pattern: str) -> icu.UnicodeSet:
    built = icu.UnicodeSet(pattern)
    built.freeze()
    return built


# Refused unless a context below allows it. \n is the one permitted line break.
_INVISIBLE = _set(
    r"[[:Cc:][:Cf:][:Co:][:Cn:][:Cs:][:Zl:][:Zp:]"
    r"[:Default_Ignorable_Code_Point:][:Noncharacter_Code_Point:]-[\n]]"
)
_PICTOGRAPH = _set(r"[:Extended_Pictographic:]")
_EMOJI = _set(r"[:Emoji:]")
_EMOJI_MODIFIER = _set(r"[:Emoji_Modifier:]")
_IDEOGRAPH = _set(r"[:Ideographic:]")
_MONGOLIAN_LETTER = _set(r"[[:sc=Mongolian:]&[:L:]]")
_VARIATION_SELECTOR = _set(r"[:Variation_Selector:]")
_IDEOGRAPHIC_SELECTORS = _set(r"[[\U000E0100-\U000E01EF][\uFE00-\uFE0D]]")
_MONGOLIAN_SELECTORS = _set(r"[[:sc=Mongolian:]&[:Variation_Selector:]]")
_TAG = _set(r"[\U000E0000-\U000E007F]")
_RGI_TAG_SEQUENCES = tuple(icu.UnicodeSet(r"[:RGI_Emoji_Tag_Sequence:]").strings())
# RFC 5892 A.1: a joining letter on the left, one on the right, transparent marks between.
_JOINS_LEFT = _set(r"[[:Joining_Type=Dual_Joining:][:Joining_Type=Left_Joining:]]")
_JOINS_RIGHT = _set(r"[[:Joining_Type=Dual_Joining:][:Joining_Type=Right_Joining:]]")
_TRANSPARENT = _set(r"[:Joining_Type=Transparent:]")
_CONTROL = _set(r"[:Cc:]")
_FORMAT = _set(r"[:Cf:]")
_PRIVATE_USE = _set(r"[:Co:]")
_UNASSIGNED = _set(r"[[:Cn:]-[:Noncharacter_Code_Point:]]")
_NONCHARACTER = _set(r"[:Noncharacter_Code_Point:]")
_SEPARATOR = _set(r"[[:Zl:][:Zp:]]")


@dataclass(frozen=True)
class ForbiddenCharacter:
    """The first refused code point: where it is, which one, and what kind it is. `hides_text`
    says whether it is there to be invisible (format characters, selectors, tags) rather than
    to break the document's structure (controls, separators, unassigned code points)."""

    index: int
    codepoint: int
    kind: str
    hides_text: bool

    @property
    def label(self) -> str:
        return f"U+{self.codepoint:04X}"


def kind_of(char: str) -> tuple[str, bool]:
    """A short, human description of a refused code point, and whether it hides text."""
    for chars, kind, hides_text in (
        (_SEPARATOR, "a line or paragraph separator", False),
        (_CONTROL, "a control character", False),
        (_TAG, "a Unicode tag character", True),
        (_VARIATION_SELECTOR, "a variation selector outside an emoji or ideograph", True),
        (_FORMAT, "an invisible formatting character", True),
        (_PRIVATE_USE, "a private-use character", False),
        (_NONCHARACTER, "a noncharacter", False),
        (_UNASSIGNED, "an unassigned code point", False),
    ):
        if chars.contains(char):
            return kind, hides_text
    return "an invisible character", True


def _tag_sequence_spans(text: str) -> set[int]:
    """Indexes covered by RGI emoji tag sequences (each starts with its visible flag)."""
    covered: set[int] = set()
    start = text.find("\U0001f3f4")
    while start != -1:
        for sequence in _RGI_TAG_SEQUENCES:
            if text.startswith(sequence, start):
                covered.update(range(start, start + len(sequence)))
                break
        start = text.find("\U0001f3f4", start + 1)
    return covered


def _emoji_element_before(text: str, index: int) -> bool:
    """Whether an emoji ZWJ element ends right before `index`: a pictograph, optionally with
    one skin-tone modifier or VS16."""
    position = index - 1
    if position >= 0 and (text[position] == "\ufe0f" or _EMOJI_MODIFIER.contains(text[position])):
        position -= 1
    return position >= 0 and bool(_PICTOGRAPH.contains(text[position]))


def _after_virama(text: str, index: int) -> bool:
    return index > 0 and icu.Char.getCombiningClass(text[index - 1]) == VIRAMA_COMBINING_CLASS


def _in_joining_context(text: str, index: int) -> bool:
    left = index - 1
    while left >= 0 and _TRANSPARENT.contains(text[left]):
        left -= 1
    right = index + 1
    while right < len(text) and _TRANSPARENT.contains(text[right]):
        right += 1
    return (
        left >= 0
        and right < len(text)
        and bool(_JOINS_LEFT.contains(text[left]))
        and bool(_JOINS_RIGHT.contains(text[right]))
    )


def _selector_fits(text: str, index: int) -> bool:
    """One variation selector, right after a base character that has such variants."""
    if index == 0 or _VARIATION_SELECTOR.contains(text[index - 1]):
        return False
    base, selector = text[index - 1], text[index]
    if selector in EMOJI_VARIATION_SELECTORS:
        return bool(_EMOJI.contains(base))
    if _IDEOGRAPHIC_SELECTORS.contains(selector):
        return bool(_IDEOGRAPH.contains(base))
    if _MONGOLIAN_SELECTORS.contains(selector):
        return bool(_MONGOLIAN_LETTER.contains(base))
    return False


def _allowed_in_context(text: str, index: int, tag_spans: set[int]) -> bool:
    char = text[index]
    if char == ZWJ:
        followed_by_pictograph = index + 1 < len(text) and _PICTOGRAPH.contains(text[index + 1])
        return (
            bool(followed_by_pictograph) and _emoji_element_before(text, index)
        ) or _after_virama(text, index)
    if char == ZWNJ:
        return _after_virama(text, index) or _in_joining_context(text, index)
    if _VARIATION_SELECTOR.contains(char):
        return _selector_fits(text, index)
    return index in tag_spans


def first_forbidden(text: str) -> ForbiddenCharacter | None:
    """The first code point of `text` that the policy refuses, or None."""
    tag_spans: set[int] | None = None
    for index, char in enumerate(text):
        if "\ud800" <= char <= "\udfff":  # valid in JSON ("\ud800"), not storable as UTF-8
            return ForbiddenCharacter(index, ord(char), "an unpaired surrogate", False)
        if not _INVISIBLE.contains(char):
            continue
        if tag_spans is None:
            tag_spans = _tag_sequence_spans(text)
        if not _allowed_in_context(text, index, tag_spans):
            return ForbiddenCharacter(index, ord(char), *kind_of(char))
    return None
