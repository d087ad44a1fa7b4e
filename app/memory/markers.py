"""The prompt's own markers in disguise: the reserved memory tags and the `§` entry delimiter,
found on a normalized skeleton of the text so that case, compatibility forms, invisible
characters, accents and look-alike letters from other scripts do not hide them.

The skeleton follows Unicode TR39 as ICU implements it: NFKC case folding (which also drops
default-ignorable characters), combining marks removed, then ICU's confusable skeleton, so
"＜/ＰＥＲＳＩＳＴＥＮＴ_memоry_data" (fullwidth, Cyrillic о) and the plain tag compare equal.
"""

from __future__ import annotations

import html
import re

import icu

RESERVED_TAG_NAME = "persistent_memory_data"
DELIMITER = "§"
# Every character that a renderer or a model may take as the end of a line.
_LINE_BREAKS = re.compile("\r\n|[\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029]")

_FOLD = icu.Normalizer2.getNFKCCasefoldInstance()
_NFD = icu.Normalizer2.getNFDInstance()
_MARKS = icu.UnicodeSet(r"[[:Mn:][:Me:]]")
_MARKS.freeze()
_SPOOF = icu.SpoofChecker()


def skeleton(text: str) -> str:
    """TR39-style skeleton: case, width, invisible characters, accents and confusable letters
    folded away. Line breaks of any kind become "\\n" first, so lines survive the folding."""
    folded = _FOLD.normalize(_LINE_BREAKS.sub("\n", text))
    bare = "".join(char for char in _NFD.normalize(folded) if not _MARKS.contains(char))
    return str(_SPOOF.getSkeleton(0, bare)).lower()


def fold_confusables(text: str) -> str:
    """ASCII stays as it is; other characters become their skeleton. Pattern scanners written
    for English keep working on text whose letters were swapped for look-alikes."""
    folded = _FOLD.normalize(_LINE_BREAKS.sub("\n", text))
    return "".join(char if char.isascii() else skeleton(char) for char in folded)


def _word(text: str) -> str:
    return re.escape(skeleton(text))


_NAME_PARTS = [_word(part) for part in RESERVED_TAG_NAME.split("_")]
_LOOSE_NAME = r"[\s_\-.]*".join(_NAME_PARTS)
_RESERVED_TAG = re.compile(
    # An opening or closing tag, with or without attributes, `/>` or `>`.
    rf"{_word('<')}\s*{_word('/')}?\s*{_LOOSE_NAME}"
    # A tag whose `<` was dropped: the name right before `>`. The bare name in a sentence is
    # allowed: it reads as a word, not as a tag.
    rf"|{_LOOSE_NAME}\s*{_word('/')}?\s*{_word('>')}"
)
_DELIMITER = skeleton(DELIMITER)


def has_reserved_tag(text: str) -> bool:
    """Whether the text holds something that reads as <persistent_memory_data> or its end
    (HTML character references too: a model reads `&lt;` as `<`)."""
    return _RESERVED_TAG.search(skeleton(html.unescape(text))) is not None


def has_delimiter_line(text: str) -> bool:
    """Whether a line of the text, once normalized, reads as the `§` entry delimiter (or
    spells it as an HTML character reference, `&sect;`)."""
    lines = skeleton(html.unescape(text)).split("\n")
    return any(line.strip() == _DELIMITER for line in lines)
