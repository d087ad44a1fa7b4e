"""Rendering memory for the prompt and the API: the block the model sees, the counts users see."""

from __future__ import annotations

from typing import Literal

from app.memory import policy
from app.memory.rules import LIMITS, SEPARATOR, Snapshot, Target

MemoryStatus = Literal["available", "unavailable", "disabled"]

OPEN_TAG = "<persistent_memory_data>"
CLOSE_TAG = "</persistent_memory_data>"
BLOCKED_PLACEHOLDER = "[entry withheld: it failed the safety scan; the user can review it]"
HEADINGS: dict[Target, str] = {"user": "USER PROFILE", "memory": "AGENT MEMORY"}


def usage_line(snapshot: Snapshot, target: Target) -> str:
    used, limit = snapshot.characters(target), LIMITS[target]
    return f"{HEADINGS[target]} [{used * 100 // limit}% - {used}/{limit} characters]"


def is_withheld(entry: str) -> bool:
    """A stored entry that today's content policy would refuse (a threat, a disguised reserved
    tag that could close the block, an invisible character), or that is not in the policy's
    normal form, is never put in the prompt, whenever and however it was stored."""
    return not entry or not policy.is_acceptable(entry)


def prompt_entries(snapshot: Snapshot, target: Target) -> tuple[str, ...]:
    """Stored entries as the model may see them: a blocked entry stays stored but is withheld."""
    return tuple(
        BLOCKED_PLACEHOLDER if is_withheld(entry) else entry for entry in snapshot.entries(target)
    )


def render_section(snapshot: Snapshot, target: Target) -> str:
    body = SEPARATOR.join(prompt_entries(snapshot, target))
    return usage_line(snapshot, target) + ("\n" + body if body else "")


def render_block(snapshot: Snapshot) -> str:
    """The complete memory block, exactly as the design (docs/design.md) shows it."""
    sections = "\n\n".join(render_section(snapshot, target) for target in ("user", "memory"))
    return f"{OPEN_TAG}\n{sections}\n{CLOSE_TAG}"


def document(snapshot: Snapshot, target: Target) -> dict[str, object]:
    """One store as the API reports it."""
    return {
        "entries": list(snapshot.entries(target)),
        "characters": snapshot.characters(target),
        "limit": LIMITS[target],
    }
