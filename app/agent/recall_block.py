"""The recall block of a turn's system prompt, as pure text: the earlier-conversation snippets
recall found, inside tags that carry a nonce drawn for this turn (as the memory block's do,
app/memory/render.py), one line per snippet whose title and text are JSON string literals with
angle and square brackets escaped, so no transcript text can close the block or pose as a tag,
a role line or a chat-template marker. Bounded in characters (RECALL_MAX_CHARS): the snippets
that fit, best first, and only those, are the ones the turn lists in its sources.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.agent.sources import ConversationSource
from app.memory.render import NonceTags, encode_entry

RECALL_TAG_NAME = "past_conversations"


class RecallTags(NonceTags):
    """`past_conversations_<nonce>`: a fresh nonce per turn, never stored, never logged."""

    prefix = RECALL_TAG_NAME


def recall_line(source: ConversationSource) -> str:
    """One snippet: `from <title literal>: <snippet literal>`."""
    return f"from {encode_entry(source.title)}: {encode_entry(source.snippet)}"


def fitting(
    sources: Sequence[ConversationSource], max_chars: int
) -> tuple[ConversationSource, ...]:
    """The first snippets whose lines (with their line breaks) fit in `max_chars`; one that does
    not fit is left out and the next is tried (a shorter one may fit)."""
    kept: list[ConversationSource] = []
    used = 0
    for source in sources:
        size = len(recall_line(source)) + 1
        if used + size <= max_chars:
            kept.append(source)
            used += size
    return tuple(kept)


def render_recall_block(sources: Sequence[ConversationSource], tags: RecallTags) -> str:
    lines = "\n".join(recall_line(source) for source in sources)
    return f"{tags.open}\n{lines}\n{tags.close}"
