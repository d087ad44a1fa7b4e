"""Import from other assistants, as pure steps: pasted text (what ChatGPT or Claude prints when
asked what it remembers, a bullet list, or one fact per line) to the entries worth proposing and
the lines dropped with a reason. Nothing here reads or writes storage: the caller proposes the
result through the memory write path (docs/mcp.md, "Import").

The pipeline: `split` (lines, bullets, prose sentences; headings kept as section hints, filler
dropped) → `candidate` (the second person rewritten to the third, markdown emphasis removed,
the content policy) → `classify` (`user` or `memory`) → `deduplicate` (against the stored
entries and each other, near-duplicates included) → `fit` (each store's capacity, in order).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Literal

from app.memory import policy
from app.memory.rules import MAX_OPERATIONS, TARGETS, Operation, Snapshot, Target, rendered_length

Reason = Literal["secret", "instruction_like", "duplicate", "too_long", "over_capacity", "invalid"]

MAX_IMPORT_CHARS = 20_000  # the whole paste (both stores together hold 3,575 characters)
MAX_ENTRY_CHARS = 500  # one fact; longer is a summary, not an entry
MAX_DROPPED_TEXT_CHARS = 200  # how much of a dropped line the preview repeats
NEAR_DUPLICATE_RATIO = 0.9  # difflib's ratio between two folded entries

# Policy categories to the reasons the preview gives. Hidden characters, the prompt's reserved
# tag, injections and exfiltration all aim at the model that reads memory: instruction-like.
_REASONS: dict[str, Reason] = {
    "secret": "secret",
    "prompt_injection": "instruction_like",
    "exfiltration": "instruction_like",
    "invisible_unicode": "instruction_like",
    "reserved_tag": "instruction_like",
}

_BULLET = re.compile(r"^\s*(?:[-*+•·‣◦▪–—]|\d{1,3}[.)]|\(\d{1,3}\))\s+")
_HEADING = re.compile(r"^\s*(?:#{1,6}\s+.*|\*\*[^*]+\*\*:?|__[^_]+__:?|[^.!?]{1,80}:)\s*$")
_INLINE_LABEL = re.compile(r"^\*\*([^*]{1,60}?):?\*\*:?\s+")
_EMPHASIS = re.compile(r"(\*\*|__|`)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")
# What assistants say around the list: an opening, an offer, a note on how memory works.
_FILLER = re.compile(
    r"^(?:here(?:'s| is| are)\b|sure\b|of course\b|certainly\b|based on\b|from (?:our|my)\b"
    r"|i (?:remember|know|have|don't|do not|can)\b|let me know\b|is there anything\b"
    r"|if (?:you|anything)\b|feel free\b|you can (?:ask|tell|manage|delete|turn)\b"
    r"|(?:this|that) is (?:all|everything)\b)",
    re.IGNORECASE,
)
_WORDS = re.compile(r"\w+")
_NUMBERS = re.compile(r"\d+")

# Section headings and words that say a fact is about a project or the environment (`memory`)
# rather than about the person (`user`, the default).
_MEMORY_SECTIONS = re.compile(
    r"\b(?:work|project|projects|technical|tech|stack|environment|setup|tools|codebase)\b",
    re.IGNORECASE,
)
_USER_SECTIONS = re.compile(
    r"\b(?:personal|about|preferences?|background|communication|style|interests|profile|life)\b",
    re.IGNORECASE,
)
_MEMORY_WORDS = re.compile(
    r"\b(?:project|repo|repository|codebase|code base|server|database|deploy(?:s|ed|ment)?"
    r"|stack|framework|library|api|endpoint|environment|config(?:uration)?|branch|ci|pipeline"
    r"|docker|kubernetes|cluster|staging|production|version|build|migration|schema|service"
    r"|app|application|uses? (?:python|typescript|javascript|go|rust|java|postgres\w*|mysql"
    r"|mariadb|sqlite|react|vue|django|fastapi|node))\b",
    re.IGNORECASE,
)
# An entry whose subject is the person: "The user is…", "Sam prefers…", "Prefers…".
_PERSON_START = re.compile(
    r"^(?:(?:the user|they|he|she|[A-Z][\w-]*)\s+)?(?:is|was|has|prefers?|likes?|dislikes?"
    r"|loves?|hates?|lives?|wants?|enjoys?|speaks?|works as|identifies|goes by)\b",
    re.IGNORECASE,
)
_SECOND_PERSON = (
    (re.compile(r"^(?:you are|you're)\b", re.IGNORECASE), "The user is"),
    (re.compile(r"^you were\b", re.IGNORECASE), "The user was"),
    (re.compile(r"^(?:you have|you've)\b", re.IGNORECASE), "The user has"),
    (re.compile(r"^your\b", re.IGNORECASE), "The user's"),
)
_YOU_VERB = re.compile(r"^you\s+([a-z]+)\b", re.IGNORECASE)
_IRREGULAR = {"do": "does", "go": "goes", "don't": "doesn't", "have": "has"}
_MODALS = frozenset({"can", "could", "will", "would", "should", "may", "might", "must", "also"})


def third_person(verb: str) -> str:
    """`verb` as it follows "The user": prefer → prefers, watch → watches, study → studies."""
    lower = verb.lower()
    if lower in _IRREGULAR:
        return _IRREGULAR[lower]
    if lower in _MODALS or lower.endswith("ed"):
        return verb
    if lower.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if len(lower) > 1 and lower.endswith("y") and lower[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


@dataclass(frozen=True)
class Line:
    """One candidate fact as pasted, with the heading of the section it came from."""

    text: str
    section: str = ""


@dataclass(frozen=True)
class Dropped:
    text: str
    reason: Reason


@dataclass(frozen=True)
class Entry:
    target: Target
    content: str


@dataclass(frozen=True)
class ImportPlan:
    """What to propose, in order, and what was left out and why."""

    entries: tuple[Entry, ...]
    dropped: tuple[Dropped, ...]

    def batches(self) -> tuple[tuple[Operation, ...], ...]:
        """The entries as add operations, in batches of at most MAX_OPERATIONS."""
        operations = [Operation(e.target, "add", content=e.content) for e in self.entries]
        return tuple(
            tuple(operations[start : start + MAX_OPERATIONS])
            for start in range(0, len(operations), MAX_OPERATIONS)
        )


def clip(text: str) -> str:
    if len(text) <= MAX_DROPPED_TEXT_CHARS:
        return text
    return text[: MAX_DROPPED_TEXT_CHARS - 1] + "…"


# -- split ---------------------------------------------------------------------------------


def split(text: str) -> list[Line]:
    """The candidate facts of a paste: each bullet or numbered item whole, each sentence of a
    prose line; headings become the section of what follows; filler is dropped."""
    lines: list[Line] = []
    section = ""
    for raw in policy.normalize(text).split("\n"):
        stripped = raw.strip()
        if not stripped or not _WORDS.search(stripped):
            continue
        bullet = _BULLET.match(stripped)
        if bullet is None and _HEADING.match(stripped):
            heading = _EMPHASIS.sub("", stripped).strip("#: ").strip()
            section = "" if _FILLER.match(heading) else heading
            continue
        if bullet is not None:
            pieces = [stripped[bullet.end() :]]
        else:
            pieces = [piece for piece in _SENTENCE_END.split(stripped) if piece.strip()]
        for piece in pieces:
            piece = piece.strip()
            if piece and not _FILLER.match(_EMPHASIS.sub("", piece)):
                lines.append(Line(piece, section))
    return lines


# -- candidate -----------------------------------------------------------------------------


def rewrite(text: str) -> str:
    """Markdown emphasis and an inline bold label removed; a fact addressed to the reader
    ("You prefer…", "Your …") written in the third person, as the user profile is."""
    label = _INLINE_LABEL.match(text)
    if label is not None:
        text = f"{label.group(1)}: {text[label.end() :]}"
    text = _EMPHASIS.sub("", text).strip()
    for pattern, replacement in _SECOND_PERSON:
        if pattern.match(text):
            return pattern.sub(replacement, text, count=1)
    verb = _YOU_VERB.match(text)
    if verb is not None:
        return f"The user {third_person(verb.group(1))}{text[verb.end() :]}"
    return text


def candidate(line: Line) -> str | Dropped:
    """The entry a line would be stored as, or why it is dropped (the content policy's
    rules, the same as every memory write's)."""
    entry = policy.normalize(rewrite(line.text))
    if not entry:
        return Dropped(clip(line.text), "invalid")
    if len(entry) > MAX_ENTRY_CHARS:
        return Dropped(clip(line.text), "too_long")
    violation = policy.check(entry)
    if violation is not None:
        return Dropped(clip(line.text), _REASONS.get(violation.category, "invalid"))
    return entry


# -- classify ------------------------------------------------------------------------------


def classify(entry: str, section: str = "") -> Target:
    """`memory` for a project or environment fact, `user` for a fact about the person.

    An entry whose subject is the person ("The user is…", "Sam prefers…", "Likes…") is `user`;
    otherwise a section heading decides ("Work", "Projects", "Technical setup" → memory;
    "Personal", "Preferences", "Background" → user); otherwise an entry that names a project or
    the environment (a repository, a server, a framework, "uses PostgreSQL") is `memory`;
    anything else is `user`, since what another assistant remembers is mostly the person.
    """
    if _PERSON_START.match(entry):
        return "user"
    if section:
        if _MEMORY_SECTIONS.search(section):
            return "memory"
        if _USER_SECTIONS.search(section):
            return "user"
    return "memory" if _MEMORY_WORDS.search(entry) else "user"


# -- deduplicate ---------------------------------------------------------------------------


def fold(text: str) -> str:
    """Case, accents' composition, whitespace and punctuation removed: what a near-duplicate
    shares with its original."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_WORDS.findall(folded.replace("_", " ")))


def is_near(a: str, b: str) -> bool:
    """Whether two folded entries say the same thing: equal, or nearly equal by difflib with
    the same numbers ("has 2 cats" and "has 3 cats" are different facts)."""
    if a == b:
        return True
    if _NUMBERS.findall(a) != _NUMBERS.findall(b):
        return False
    matcher = SequenceMatcher(None, a, b, autojunk=False)
    return (
        matcher.real_quick_ratio() >= NEAR_DUPLICATE_RATIO
        and matcher.quick_ratio() >= NEAR_DUPLICATE_RATIO
        and matcher.ratio() >= NEAR_DUPLICATE_RATIO
    )


def _seen_in(folded: str, seen: Iterable[str]) -> bool:
    return any(is_near(folded, other) for other in seen)


# -- fit and the whole plan ----------------------------------------------------------------


def fit(snapshot: Snapshot, entries: Sequence[Entry]) -> tuple[list[Entry], list[Dropped]]:
    """Each entry in order while its store keeps within its limit (delimiters counted as the
    capacity check counts them); the others are over capacity."""
    stores: dict[Target, list[str]] = {target: list(snapshot.entries(target)) for target in TARGETS}
    kept: list[Entry] = []
    dropped: list[Dropped] = []
    for entry in entries:
        store = stores[entry.target]
        if rendered_length([*store, entry.content]) <= snapshot.limit(entry.target):
            store.append(entry.content)
            kept.append(entry)
        else:
            dropped.append(Dropped(clip(entry.content), "over_capacity"))
    return kept, dropped


def plan(text: str, snapshot: Snapshot) -> ImportPlan:
    """The import of `text` into `snapshot`: the entries to propose and what was dropped, in
    the order they were pasted. In a project, a project or environment fact goes to the
    project's document instead of the general one."""
    work: Target = "project" if snapshot.in_project else "memory"
    dropped: list[Dropped] = []
    seen = [fold(entry) for entry in (*snapshot.user, *snapshot.memory, *snapshot.project)]
    entries: list[Entry] = []
    for line in split(text):
        found = candidate(line)
        if isinstance(found, Dropped):
            dropped.append(found)
            continue
        folded = fold(found)
        if not folded or _seen_in(folded, seen):
            dropped.append(Dropped(clip(found), "duplicate" if folded else "invalid"))
            continue
        seen.append(folded)
        target = classify(found, line.section)
        entries.append(Entry(work if target == "memory" else target, found))
    kept, over = fit(snapshot, entries)
    return ImportPlan(tuple(kept), tuple(dropped + over))
