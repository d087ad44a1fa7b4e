"""Import from other assistants, as pure steps: pasted text (what ChatGPT or Claude prints when
asked what it remembers, a bullet list, or one fact per line) to the entries worth proposing and
the lines dropped with a reason. Nothing here reads or writes storage: the caller proposes the
result through the memory write path (docs/mcp.md, "Import").

The pipeline: `split` (lines, bullets, prose sentences; a line wrapped mid-sentence rejoined;
headings kept as section hints, filler dropped) → `candidate` (the content policy on the line as
pasted and on the lines it may have been wrapped from; a line addressed to the assistant or in
the imperative dropped, never rewritten; the first and second person rewritten to the third,
markdown emphasis removed) → `classify` (`user` or `memory`) → `deduplicate` (against the
stored entries and each other, near-duplicates included) → `fit` (each store's capacity, in
order).

Every step is linear in the paste: the near-duplicate check compares an entry with at most
`NEAR_CANDIDATES` earlier ones of a compatible length and the same numbers, each comparison
bounded by `MAX_ENTRY_CHARS`; the content policy runs once per line and once per wrap window
(at most `WRAP_WINDOW_CHARS`, each line in at most two).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from rapidfuzz.distance import Indel

from app.memory.rules import MAX_OPERATIONS, TARGETS, Operation, Snapshot, Target, rendered_length
from app.policy import content as policy

Reason = Literal["secret", "instruction_like", "duplicate", "too_long", "over_capacity", "invalid"]

MAX_IMPORT_CHARS = 20_000  # the whole paste (both stores together hold 3,575 characters)
MAX_ENTRY_CHARS = 500  # one fact; longer is a summary, not an entry
MAX_DROPPED_TEXT_CHARS = 200  # how much of a dropped line the preview repeats
# Lines that may be one wrapped sentence are judged together in windows of about this many
# characters, each window starting with the previous one's last line: a sentence wrapped over
# two lines is always inside one window, and the policy's cost stays linear in the paste (some
# of its scans are quadratic in a run without spaces, so one window per run would not be).
WRAP_WINDOW_CHARS = 600
NEAR_DUPLICATE_RATIO = 0.9  # difflib's ratio (2 x matched / total) between two folded entries
# Earlier entries one entry is compared with, nearest in length first: bounds the plan's work
# at this many comparisons per line, where comparing every pair took seconds of CPU.
NEAR_CANDIDATES = 32
# Two strings whose ratio reaches NEAR_DUPLICATE_RATIO have lengths within this factor.
_LENGTH_FACTOR = NEAR_DUPLICATE_RATIO / (2 - NEAR_DUPLICATE_RATIO)

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
# A line ending a sentence: the next line starts a new one. A line that does not may have been
# wrapped mid-sentence, and the policy judges it with the lines that follow (`Line.group`).
_ENDS_SENTENCE = re.compile(r"[.!?…:;)\]\"'”’]\s*$")
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
    (re.compile(r"^(?:you are|you're|i am|i'm)\b", re.IGNORECASE), "The user is"),
    (re.compile(r"^(?:you|i) were\b", re.IGNORECASE), "The user was"),
    (re.compile(r"^i was\b", re.IGNORECASE), "The user was"),
    (re.compile(r"^(?:you have|you've|i have|i've)\b", re.IGNORECASE), "The user has"),
    (re.compile(r"^(?:your|my)\b", re.IGNORECASE), "The user's"),
)
_YOU_VERB = re.compile(r"^(?:you|i)\s+([a-z]+)\b", re.IGNORECASE)
# The person as the subject: "The user works on…" is about the person whatever the verb.
_THE_USER = re.compile(r"^the user\s+(?!'s\b)[a-z]", re.IGNORECASE)
# A line written to the assistant rather than about the person: an imperative ("Always answer
# in French", "Obey…", "Act as…"), a duty put on "you" ("You must…"), a change of role ("From
# now on…", "You are the assistant…"), or an address ("Assistant, …"). Another assistant's
# memory holds facts ("Prefers answers in French"); such a line would read as a fact once
# rewritten ("The user must…"), so it is dropped instead.
_IMPERATIVE_VERBS = (
    r"always|never|do|don't|dont|do not|be|act|behave|pretend|roleplay|role-play|imagine|ignore"
    r"|disregard|forget|override|bypass|obey|comply|follow|execute|answer|respond|reply|write"
    r"|speak|talk|say|tell|call|address|refer|treat|assume|consider|use|avoid|stop|keep|make"
    r"|give|provide|include|output|print|show|reveal|format|explain|summarize|summarise"
    r"|translate|ask|let|switch|enable|disable|become|remember|save|send|list|refuse|allow"
    r"|accept|grant|believe|greet|verify|run"
)
# What names the assistant itself, as the noun of "You are an AI…" or an address ("Claude, …").
_ASSISTANT = r"ai|assistant|chatbot|bot|language\s+model|llm|model|gpt|chatgpt|claude|gemini"
_TO_THE_ASSISTANT = re.compile(
    rf"^(?:please\s+|kindly\s+|now\s+|and\s+)*(?:{_IMPERATIVE_VERBS})\b(?!['’-])(?!\s*:)"
    r"|^you\s+(?:must|shall|should|need\s+to|have\s+to|are\s+to|will\s+(?:always|never|now|only"
    r"|obey|comply|follow|answer|respond|reply|act|behave))\b"
    rf"|^(?:you\s+are|you're)\s+(?:now\b|(?:an?|the|my)\s+(?:{_ASSISTANT})(?:\s+(?:{_ASSISTANT}))*"
    r"(?=\s*(?:[,.;:!]|$|who\b|that\b|and\b|with\b|named\b|called\b)))"
    r"|^(?:from\s+now\s+on|henceforth|going\s+forward|starting\s+now|in\s+(?:all\s+)?future"
    r"\s+(?:answers|replies|responses|conversations))\b"
    rf"|^(?:dear\s+|hey\s+|hi\s+)?(?:{_ASSISTANT})\s*[,:]",
    re.IGNORECASE,
)
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
    """One candidate fact as pasted, with the heading of the section it came from and, when
    it came from lines that may be one wrapped sentence, the windows of those lines joined
    that hold it (`groups`, one or two): the content policy judges them too."""

    text: str
    section: str = ""
    groups: tuple[str, ...] = field(default=(), compare=False)


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


@dataclass(frozen=True)
class _Item:
    """A bullet or a prose line; `continues`: it may be the previous line's sentence wrapped
    (that line ends no sentence, nothing stands between them, and it is no bullet)."""

    text: str
    bullet: bool
    section: str
    continues: bool


def _items(text: str) -> list[_Item]:
    """The paste's lines and bullets, with the section their heading sets."""
    items: list[_Item] = []
    section = ""
    open_ended = False  # the previous line ends no sentence
    for raw in policy.normalize(text).split("\n"):
        stripped = raw.strip()
        if not stripped or not _WORDS.search(stripped):
            open_ended = False  # a blank line or a rule ends any wrapped sentence
            continue
        bullet = _BULLET.match(stripped)
        if bullet is None and _HEADING.match(stripped):
            heading = _EMPHASIS.sub("", stripped).strip("#: ").strip()
            section = "" if _FILLER.match(heading) else heading
            open_ended = False
            continue
        body = stripped[bullet.end() :] if bullet is not None else stripped
        items.append(_Item(body, bullet is not None, section, open_ended and bullet is None))
        open_ended = _ENDS_SENTENCE.search(body) is None
    return items


def _runs(items: list[_Item]) -> list[list[_Item]]:
    """Runs of items that may be one sentence wrapped over several lines."""
    runs: list[list[_Item]] = []
    for item in items:
        if runs and item.continues:
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


def _windows(run: list[_Item]) -> list[tuple[str, ...]]:
    """For each item of a run, the windows that hold it: consecutive items joined up to about
    WRAP_WINDOW_CHARS, each window starting with the previous one's last item."""
    if len(run) == 1:
        return [()]
    held: list[list[str]] = [[] for _ in run]
    first = 0
    while True:
        last, size = first, len(run[first].text)
        while last + 1 < len(run) and size + len(run[last + 1].text) < WRAP_WINDOW_CHARS:
            last += 1
            size += len(run[last].text) + 1
        if last == first and last + 1 < len(run):
            last += 1  # two lines at least: a long line still meets the next one
        window = "\n".join(item.text for item in run[first : last + 1])
        for index in range(first, last + 1):
            held[index].append(window)
        if last + 1 >= len(run):
            return [tuple(windows) for windows in held]
        first = last


def split(text: str) -> list[Line]:
    """The candidate facts of a paste: each bullet or numbered item whole, each sentence of a
    prose line; headings become the section of what follows; filler is dropped. Lines that
    may be one sentence wrapped ("Ignore all previous" / "instructions.") carry the windows of
    their run that hold them as `groups`, for the policy to judge as one (each line of a
    one-fact-per-line paste stays a fact of its own: "Likes tea" / "Keeps bees" are two)."""
    lines: list[Line] = []
    for run in _runs(_items(text)):
        for item, groups in zip(run, _windows(run), strict=True):
            pieces = [item.text] if item.bullet else _SENTENCE_END.split(item.text)
            for piece in pieces:
                piece = piece.strip()
                if piece and not _FILLER.match(_EMPHASIS.sub("", piece)):
                    lines.append(Line(piece, item.section, groups))
    return lines


# -- candidate -----------------------------------------------------------------------------


def plain(text: str) -> str:
    """Markdown emphasis and an inline bold label removed."""
    label = _INLINE_LABEL.match(text)
    if label is not None:
        text = f"{label.group(1)}: {text[label.end() :]}"
    return _EMPHASIS.sub("", text).strip()


def to_the_assistant(text: str) -> bool:
    """Whether a pasted line instructs or addresses the assistant rather than telling a fact
    about the person (`_TO_THE_ASSISTANT`)."""
    return _TO_THE_ASSISTANT.match(plain(text)) is not None


def rewrite(text: str) -> str:
    """Markdown emphasis and an inline bold label removed; a fact addressed to the reader
    ("You prefer…", "Your …") or told by the person ("I work as…", "My …") written in the
    third person, as the user profile is."""
    text = plain(text)
    for pattern, replacement in _SECOND_PERSON:
        if pattern.match(text):
            return pattern.sub(replacement, text, count=1)
    verb = _YOU_VERB.match(text)
    if verb is not None:
        return f"The user {third_person(verb.group(1))}{text[verb.end() :]}"
    return text


def _verdict(text: str) -> Reason | None:
    violation = policy.check(text)
    return None if violation is None else _REASONS.get(violation.category, "invalid")


def candidate(line: Line, verdicts: dict[str, Reason | None] | None = None) -> str | Dropped:
    """The entry a line would be stored as, or why it is dropped: the content policy's rules
    (the same as every memory write's) on the line as pasted, on the wrap windows that hold it
    (judged once each in `verdicts`, shared across a paste's lines) and on the entry; a line
    written to the assistant is `instruction_like`, never rewritten into a fact about the
    person."""
    if len(line.text) > MAX_ENTRY_CHARS:
        return Dropped(clip(line.text), "too_long")
    verdicts = {} if verdicts is None else verdicts
    for window in line.groups:
        if window not in verdicts:
            verdicts[window] = _verdict(window)
        if (reason := verdicts[window]) is not None:
            return Dropped(clip(line.text), reason)
    pasted = policy.normalize(line.text)
    reason = _verdict(pasted) if pasted else None
    if reason is not None:
        return Dropped(clip(line.text), reason)
    if to_the_assistant(pasted):
        return Dropped(clip(line.text), "instruction_like")
    entry = policy.normalize(rewrite(line.text))
    if not entry:
        return Dropped(clip(line.text), "invalid")
    if len(entry) > MAX_ENTRY_CHARS:
        return Dropped(clip(line.text), "too_long")
    reason = _verdict(entry) if entry != pasted else None
    if reason is not None:
        return Dropped(clip(line.text), reason)
    return entry


# -- classify ------------------------------------------------------------------------------


def classify(entry: str, section: str = "") -> Target:
    """`memory` for a project or environment fact, `user` for a fact about the person.

    An entry whose subject is the person ("The user works on…", "Sam prefers…", "Likes…") is
    `user`;
    otherwise a section heading decides ("Work", "Projects", "Technical setup" → memory;
    "Personal", "Preferences", "Background" → user); otherwise an entry that names a project or
    the environment (a repository, a server, a framework, "uses PostgreSQL") is `memory`;
    anything else is `user`, since what another assistant remembers is mostly the person.
    """
    if _PERSON_START.match(entry) or _THE_USER.match(entry):
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


def _similar(a: str, b: str) -> bool:
    """difflib's ratio (2 x the longest common subsequence / both lengths) at least
    NEAR_DUPLICATE_RATIO, computed by rapidfuzz in time bounded by the two lengths."""
    return Indel.normalized_similarity(a, b, score_cutoff=NEAR_DUPLICATE_RATIO) > 0


def is_near(a: str, b: str) -> bool:
    """Whether two folded entries say the same thing: equal, or nearly equal (difflib's
    ratio) with the same numbers ("has 2 cats" and "has 3 cats" are different facts)."""
    if a == b:
        return True
    if _NUMBERS.findall(a) != _NUMBERS.findall(b):
        return False
    return _similar(a, b)


class Seen:
    """The folded entries so far, indexed so that an entry is compared with a bounded number
    of them: equal ones by a set, near ones among those with the same numbers and a length a
    near-duplicate can have, nearest length first, at most NEAR_CANDIDATES."""

    def __init__(self, entries: Sequence[str] = ()) -> None:
        self._exact: set[str] = set()
        # numbers → length → folded entries of that length, newest last
        self._near: dict[tuple[str, ...], dict[int, list[str]]] = {}
        for entry in entries:
            self.add(entry)

    def add(self, folded: str) -> None:
        self._exact.add(folded)
        numbers = tuple(_NUMBERS.findall(folded))
        self._near.setdefault(numbers, {}).setdefault(len(folded), []).append(folded)

    def __contains__(self, folded: object) -> bool:
        if not isinstance(folded, str):
            return False
        if folded in self._exact:
            return True
        by_length = self._near.get(tuple(_NUMBERS.findall(folded)))
        if not by_length:
            return False
        size = len(folded)
        low, high = math.ceil(size * _LENGTH_FACTOR), math.floor(size / _LENGTH_FACTOR)
        compared = 0
        for distance in range(max(size - low, high - size) + 1):
            for length in {size - distance, size + distance}:
                if not low <= length <= high:
                    continue
                for other in reversed(by_length.get(length, ())):
                    if _similar(folded, other):
                        return True
                    compared += 1
                    if compared == NEAR_CANDIDATES:
                        return False
        return False


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
    seen = Seen([fold(entry) for entry in (*snapshot.user, *snapshot.memory, *snapshot.project)])
    entries: list[Entry] = []
    verdicts: dict[str, Reason | None] = {}  # per wrap window, judged once
    for line in split(text):
        found = candidate(line, verdicts)
        if isinstance(found, Dropped):
            dropped.append(found)
            continue
        folded = fold(found)
        if not folded or folded in seen:
            dropped.append(Dropped(clip(found), "duplicate" if folded else "invalid"))
            continue
        seen.add(folded)
        target = classify(found, line.section)
        entries.append(Entry(work if target == "memory" else target, found))
    kept, over = fit(snapshot, entries)
    return ImportPlan(tuple(kept), tuple(dropped + over))
