"""Rendering memory for the prompt and the API: the block the model sees, the counts users see.

The block is structural, so that no stored text can end it or pose as the system, whatever its
spelling: its tags carry a nonce the caller draws for each turn (never stored, never logged),
which stored text cannot know; and every entry is one JSON string literal on its own line, so a
stored newline, quote, role line or chat-template marker never appears raw. Inside the literal,
angle and square brackets are escaped too (`\\u003c`): a server that maps `<|eot_id|>` or
`[INST]` in message text to its special tokens finds none. Lines that are not string literals
(the headings and the withheld placeholder) come only from this module.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal, Self

from app.memory.provenance import utc_text
from app.memory.rules import Snapshot, Target
from app.names import RESERVED_TAG_NAME
from app.policy import content as policy

MemoryStatus = Literal["available", "unavailable", "disabled"]

BLOCKED_PLACEHOLDER = "[entry withheld: it failed the safety scan; the user can review it]"
HEADINGS: dict[Target, str] = {
    "user": "USER PROFILE",
    "memory": "AGENT MEMORY",
    "project": "PROJECT MEMORY",
}
# The order of the block's sections; a section is shown when the snapshot's scope reaches it.
SECTION_ORDER: tuple[Target, ...] = ("user", "project", "memory")
# 128 bits from `secrets.token_hex(16)`: no stored text can guess the tag of a later turn.
NONCE = re.compile(r"^[0-9a-f]{32}$")
# Characters a tokenizer or a chat template may read as structure: written as escapes.
_STRUCTURAL = frozenset("<>[]")
_STRUCTURAL_CHARS = re.compile(r"[<>\[\]]")
# Invisible, but part of ordinary words and emoji (the policy allows them only there): kept raw
# so that a family emoji or a Persian word stays readable. They never break a line.
_JOINERS = frozenset("\u200c\u200d")


@dataclass(frozen=True)
class NonceTags:
    """A prompt block's tags for one turn, `<prefix>_<nonce>`: a fresh nonce per turn, never
    stored, never logged. The memory block's (`BlockTags`) and the recall block's
    (app/agent/recall_block.py) differ only in their prefix."""

    prefix: ClassVar[str]
    nonce: str

    def __post_init__(self) -> None:
        if not NONCE.match(self.nonce):
            raise ValueError("a block nonce is 32 lowercase hex digits")

    @classmethod
    def new(cls) -> Self:
        return cls(secrets.token_hex(16))

    @property
    def name(self) -> str:
        return f"{self.prefix}_{self.nonce}"

    @property
    def open(self) -> str:
        return f"<{self.name}>"

    @property
    def close(self) -> str:
        return f"</{self.name}>"


class BlockTags(NonceTags):
    """The memory block's tag for one turn: `persistent_memory_data_<nonce>`."""

    prefix = RESERVED_TAG_NAME


def usage_line(snapshot: Snapshot, target: Target) -> str:
    used, limit = snapshot.characters(target), snapshot.limit(target)
    return f"{HEADINGS[target]} [{used * 100 // limit}% - {used}/{limit} characters]"


def is_withheld(entry: str) -> bool:
    """A stored entry that today's content policy would refuse (a threat, a disguised reserved
    tag, an invisible character), or that is not in the policy's normal form, is never put in
    the prompt, whenever and however it was stored."""
    return not entry or not policy.is_acceptable(entry)


Withheld = Callable[[str], bool]


class WithheldEntries:
    """`is_withheld`, remembered for the entries this process has shown. Every turn's block
    shows every stored entry, and the policy's scan (a catalogue of secret formats, the
    injection patterns) is the costliest pure code of a turn (docs/performance.md), while its
    verdict depends only on the entry's text and the policy, which is this process's code.

    A verdict is kept under a keyed digest of its owner and the entry, never the text: the key
    is drawn when the process builds this and never leaves it, so nothing kept reveals or
    confirms an entry, and a forgotten or erased entry leaves only a digest nobody can link to
    it. Per owner: one person's verdict never answers for another's, so how soon a turn starts
    tells nobody whether someone else has stored the same text. At most `size` verdicts (by
    default the entries of a few thousand full memories; docs/privacy.md), the least recently
    used dropped first. Safe to share between threads."""

    def __init__(self, size: int = 65_536, verdict: Withheld = is_withheld) -> None:
        self.size = size
        self._verdict = verdict
        self._key = secrets.token_bytes(hashlib.blake2b.MAX_KEY_SIZE)
        self._seen: dict[bytes, bool] = {}  # insertion order is recency
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._seen)

    def digest(self, entry: str, owner: str = "") -> bytes:
        # "surrogatepass": any str has bytes here, whatever a database handed over.
        owned = owner.encode("utf-8", "surrogatepass")
        # The owner's length first: no (owner, entry) pair reads as another.
        hashed = hashlib.blake2b(len(owned).to_bytes(4, "big"), key=self._key, digest_size=16)
        hashed.update(owned)
        hashed.update(entry.encode("utf-8", "surrogatepass"))
        return hashed.digest()

    def of(self, owner: str) -> Withheld:
        """The verdicts on `owner`'s entries."""
        return lambda entry: self(entry, owner)

    def __call__(self, entry: str, owner: str = "") -> bool:
        digest = self.digest(entry, owner)
        with self._lock:
            withheld = self._seen.pop(digest, None)
            if withheld is not None:
                self._seen[digest] = withheld
                return withheld
        withheld = self._verdict(entry)  # outside the lock: another thread may scan meanwhile
        with self._lock:
            self._seen[digest] = withheld
            while len(self._seen) > self.size:
                del self._seen[next(iter(self._seen))]
        return withheld


def prompt_entries(
    snapshot: Snapshot, target: Target, withheld: Withheld = is_withheld
) -> tuple[str | None, ...]:
    """Stored entries as the model may see them: a blocked entry stays stored but is withheld
    (None)."""
    return tuple(None if withheld(entry) else entry for entry in snapshot.entries(target))


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


def encode_entry(entry: str) -> str:
    """One entry as a JSON string literal that `json.loads` reads back exactly: readable text
    stays as it is; quotes, backslashes, every line break and invisible character (but the
    joiners), and angle and square brackets are escapes. The result is one line."""
    literal = json.dumps(entry, ensure_ascii=False)
    if literal.isprintable() and not _STRUCTURAL_CHARS.search(literal):
        return literal  # nothing to escape: most entries, at a fraction of the walk below
    return "".join(
        _escape(char)
        if char in _STRUCTURAL or not (char.isprintable() or char in _JOINERS)
        else char
        for char in literal
    )


def render_section(snapshot: Snapshot, target: Target, withheld: Withheld = is_withheld) -> str:
    lines = [usage_line(snapshot, target)]
    lines.extend(
        BLOCKED_PLACEHOLDER if entry is None else encode_entry(entry)
        for entry in prompt_entries(snapshot, target, withheld)
    )
    return "\n".join(lines)


def render_block(snapshot: Snapshot, tags: BlockTags, withheld: Withheld = is_withheld) -> str:
    """The complete memory block: headings with usage as in docs/design.md, one string literal
    per entry, a blank line between stores, inside this turn's tags (docs/threat-model.md).
    Only the documents of the snapshot's scope: in a project, the user profile and the project's
    document (and the general one only when the project is opted into it). `withheld`: the
    policy's verdict, `is_withheld` or a `WithheldEntries` remembering it."""
    sections = "\n\n".join(
        render_section(snapshot, target, withheld)
        for target in SECTION_ORDER
        if target in snapshot.targets
    )
    return f"{tags.open}\n{sections}\n{tags.close}"


def document(snapshot: Snapshot, target: Target) -> dict[str, object]:
    """One store as the API reports it; `expiring` (remember-until), in the entries' order, only
    when an entry of the store has an expiry."""
    view: dict[str, object] = {
        "entries": list(snapshot.entries(target)),
        "characters": snapshot.characters(target),
        "limit": snapshot.limit(target),
    }
    expiring = [
        {"text": entry, "expires_at": utc_text(at)}
        for entry in snapshot.entries(target)
        if (at := snapshot.expiry(target, entry)) is not None
    ]
    if expiring:
        view["expiring"] = expiring
    return view
