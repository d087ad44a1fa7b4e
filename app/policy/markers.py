"""The prompt's own markers in disguise: the reserved memory tags and the `§` entry delimiter,
found on a normalized skeleton of the text so that case, compatibility forms, invisible
characters, accents, look-alike letters from other scripts, small capitals, digits for letters
and transport encodings do not hide them.

This is the second layer: the memory block's real tags carry a per-turn nonce and every entry is
rendered as a string literal (`render`), so no stored text can close the block whatever its
spelling. Refusing look-alikes on write keeps such text out of memory in the first place.

The skeleton follows Unicode TR39 as ICU implements it: NFKC case folding (which also drops
default-ignorable characters), combining marks removed, then ICU's confusable skeleton, so
"＜/ＰＥＲＳＩＳＴＥＮＴ_memоry_data" (fullwidth, Cyrillic о) and the plain tag compare equal.
Small capitals ("ᴘᴇʀsɪsᴛᴇɴᴛ"), which TR39 does not map, are folded by their Unicode names.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Iterator
from urllib.parse import unquote

import icu

from app.names import RESERVED_TAG_NAME as RESERVED_TAG_NAME

DELIMITER = "§"
# Every character that a renderer or a model may take as the end of a line.
_LINE_BREAKS = re.compile("\r\n|[\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029]")

_FOLD = icu.Normalizer2.getNFKCCasefoldInstance()
_NFD = icu.Normalizer2.getNFDInstance()
_MARKS = icu.UnicodeSet(r"[[:Mn:][:Me:]]")
_MARKS.freeze()
_SPOOF = icu.SpoofChecker()

# The blocks that hold Latin small capitals (IPA, phonetic extensions, Latin Extended-D/F/G).
_SMALL_CAPITAL_BLOCKS = ((0x0250, 0x02B0), (0x1D00, 0x1DC0), (0xA720, 0xA800), (0x10780, 0x107C0))
_SMALL_CAPITAL_NAME = re.compile(
    r"^(LATIN|MODIFIER) (LETTER SMALL CAPITAL|SMALL CAPITAL LETTER|CAPITAL LETTER SMALL CAPITAL) "
    r"(?P<letter>[A-Z])( WITH .*)?$"
)


def _small_capitals() -> dict[int, str]:
    found: dict[int, str] = {}
    for start, stop in _SMALL_CAPITAL_BLOCKS:
        for codepoint in range(start, stop):
            named = _SMALL_CAPITAL_NAME.match(unicodedata.name(chr(codepoint), ""))
            if named is not None:
                found[codepoint] = named.group("letter").lower()
    return found


_SMALL_CAPITALS = _small_capitals()


def skeleton(text: str) -> str:
    """TR39-style skeleton: case, width, invisible characters, accents, small capitals and
    confusable letters folded away. Line breaks of any kind become "\\n" first, so lines
    survive the folding."""
    folded = _FOLD.normalize(_LINE_BREAKS.sub("\n", text).translate(_SMALL_CAPITALS))
    bare = "".join(char for char in _NFD.normalize(folded) if not _MARKS.contains(char))
    return str(_SPOOF.getSkeleton(0, bare)).lower()


def fold_confusables(text: str) -> str:
    """ASCII stays as it is; other characters become their skeleton. Pattern scanners written
    for English keep working on text whose letters were swapped for look-alikes."""
    folded = _FOLD.normalize(_LINE_BREAKS.sub("\n", text).translate(_SMALL_CAPITALS))
    return "".join(char if char.isascii() else skeleton(char) for char in folded)


_BACKSLASH_ESCAPE = re.compile(
    r"\\(?:u\{(?P<braced>[0-9a-fA-F]{1,6})\}|u(?P<u4>[0-9a-fA-F]{4})|U(?P<u8>[0-9a-fA-F]{8})"
    r"|x(?P<x2>[0-9a-fA-F]{2}))"
)
_DECODING_ROUNDS = 4


def _backslash_unescape(text: str) -> str:
    """JSON, JavaScript and Python escapes (`\\u003c`, `\\u{3c}`, `\\x3c`) as characters."""

    def character(match: re.Match[str]) -> str:
        digits = next(value for value in match.groupdict().values() if value)
        codepoint = int(digits, 16)
        return chr(codepoint) if codepoint <= 0x10FFFF else match.group()

    return _BACKSLASH_ESCAPE.sub(character, text)


def decodings(text: str) -> Iterator[str]:
    """The text, then what it reads as once HTML character references, URL percent-encoding
    and backslash escapes are decoded, round after round (`&amp;lt;` is `&lt;`, then `<`): a
    model decodes them as readily as a browser does."""
    yield text
    for _ in range(_DECODING_ROUNDS):
        decoded = _backslash_unescape(unquote(html.unescape(text), errors="replace"))
        if decoded == text:
            return
        text = decoded
        yield text


def _word(text: str) -> str:
    return re.escape(skeleton(text))


# Digits and symbols written for letters ("pers1stent", "d4t4"), compared on the skeleton, where
# "1", "|" and "I" already read as "l".
_LEET = {"a": "a4@", "e": "e3", "i": "il!", "o": "o0", "s": "s5$", "t": "t7+"}


def _loose_letters(part: str) -> str:
    return "".join(
        f"[{re.escape(_LEET[char])}]" if char in _LEET else re.escape(char)
        for char in skeleton(part)
    )


# Angle brackets and the brackets that look like them (skeletons, so "＜" and "ᐸ" are in).
_OPENERS = "".join(sorted({skeleton(char) for char in "<‹«⟨〈〈《❬❮❰ᐸ＜﹤˂⦑⧼⟪"}))
_CLOSERS = "".join(sorted({skeleton(char) for char in ">›»⟩〉〉》❭❯❱ᐳ＞﹥˃⦒⧽⟫"}))
_NAME_PARTS = [_loose_letters(part) for part in RESERVED_TAG_NAME.split("_")]
_LOOSE_NAME = r"[\s_\-.]*".join(_NAME_PARTS)
_RESERVED_TAG = re.compile(
    # An opening or closing tag, with or without attributes, `/>` or `>`.
    rf"[{re.escape(_OPENERS)}]\s*{_word('/')}?\s*{_LOOSE_NAME}"
    # A tag whose `<` was dropped: the name right before `>`. The bare name in a sentence is
    # allowed: it reads as a word, not as a tag.
    rf"|{_LOOSE_NAME}[\w\-]*\s*{_word('/')}?\s*[{re.escape(_CLOSERS)}]"
)
_DELIMITER = skeleton(DELIMITER)


def has_reserved_tag(text: str) -> bool:
    """Whether the text holds something that reads as <persistent_memory_data> or its end,
    also encoded (`&lt;`, `%3C`, `\\u003c`, and those encoded again)."""
    return any(_RESERVED_TAG.search(skeleton(form)) for form in decodings(text))


def has_delimiter_line(text: str) -> bool:
    """Whether a line of the text, once normalized, reads as the `§` entry delimiter (or
    spells it as an HTML character reference, `&sect;`)."""
    lines = skeleton(html.unescape(text)).split("\n")
    return any(line.strip() == _DELIMITER for line in lines)
