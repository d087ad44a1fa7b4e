"""Versioned prompt templates (Jinja2, StrictUndefined): behaviour policy in `prompts/`, values
from code."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from jinja2 import Environment, FileSystemLoader, StrictUndefined, Template

from app.agent.recall_block import RecallTags, render_recall_block
from app.agent.sources import ConversationSource
from app.memory.provenance import SaveMode
from app.memory.render import (
    BlockTags,
    MemoryStatus,
    Withheld,
    WithheldEntries,
    encode_entry,
    is_withheld,
    render_block,
)
from app.memory.rules import GENERAL_TARGETS, LIMITS, MemoryUsage, Snapshot, Target

PROMPTS_ROOT = Path(__file__).resolve().parents[2] / "prompts"
PromptKind = Literal["system", "eval", "recall"]
RECALL_PROMPT_VERSION = "v1"


def new_block_tags() -> BlockTags:
    """This turn's memory-block tags: a fresh nonce from the OS's CSPRNG, held only by the
    compiled prompt (never stored, never logged), so no stored text can know the closing tag."""
    return BlockTags(secrets.token_hex(16))


@dataclass(frozen=True)
class MemoryView:
    """The runtime values the system template needs; an unavailable read renders empty.
    `save_mode` is the person's, read at turn start (None: unknown, rendered as "unknown").
    `targets`: the documents of the turn's scope; `project_name` the project's (None outside
    projects), rendered as a JSON string literal like an entry: a name is data."""

    status: MemoryStatus
    snapshot: Snapshot
    tool_offered: bool
    save_mode: SaveMode | None = None
    targets: tuple[Target, ...] = GENERAL_TARGETS
    project_name: str | None = None
    # Whose memory (required: the remembered verdicts are kept per person).
    owner: str = field(kw_only=True)

    def variables(self, tags: BlockTags, withheld: Withheld = is_withheld) -> dict[str, object]:
        shown = self.status == "available"
        usage = self.snapshot.usage() if shown else MemoryUsage()
        return {
            "memory_status": self.status,
            "memory_block": render_block(self.snapshot, tags, withheld) if shown else "",
            # The tag's bare name, for the prose: the closing tag itself appears only once.
            "memory_tag": tags.name,
            "memory_tool": self.tool_offered,
            "save_mode": self.save_mode or "unknown",
            "user_memory_used": usage.user,
            "user_memory_limit": LIMITS["user"],
            "memory_used": usage.memory,
            "memory_limit": LIMITS["memory"],
            # Projects (prompt v4): whether the turn runs in one, its name as a string literal,
            # whether the general document is in its scope, and the project document's usage.
            "in_project": "project" in self.targets,
            "project_name": encode_entry(self.project_name or ""),
            "general_memory": "memory" in self.targets,
            "project_memory_used": usage.project or 0,
            "project_memory_limit": self.snapshot.project_limit,
        }


class PromptLibrary:
    """Loads `prompts/{kind}/{version}.md.j2`; a missing variable is an error, never blank."""

    def __init__(self, root: Path = PROMPTS_ROOT) -> None:
        self.root = root
        self.environment = Environment(
            loader=FileSystemLoader(str(root)),
            undefined=StrictUndefined,
            autoescape=False,  # plain text for a model, not HTML
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
            # A version's file never changes (a new prompt is a new version), so a compiled
            # template is kept: Jinja's default re-checks the file's mtime on every turn.
            auto_reload=False,
        )
        # The policy's verdict on each stored entry, kept across turns (by digest, not text).
        self.withheld = WithheldEntries()

    def template(self, kind: PromptKind, version: str) -> Template:
        return self.environment.get_template(f"{kind}/{version}.md.j2")

    def system_prompt(
        self,
        version: str,
        memory: MemoryView,
        *,
        search: bool = False,
        tags: BlockTags | None = None,
    ) -> str:
        """`search`: whether conversation_search is offered (templates before v2 ignore it).
        `tags`: the memory block's tags, fresh for every call unless a test pins them."""
        tags = tags or new_block_tags()
        withheld = self.withheld.of(memory.owner)
        # `today` (v4): the date a remember-until day is read against ("until the 20th").
        today = datetime.now(UTC).date().isoformat()
        variables = {**memory.variables(tags, withheld), "search_tool": search, "today": today}
        return self.template("system", version).render(**variables).strip()

    def recall_section(
        self,
        sources: Sequence[ConversationSource],
        *,
        tags: RecallTags | None = None,
        version: str = RECALL_PROMPT_VERSION,
    ) -> str:
        """The recall block with its prose, appended to the system prompt (empty: no snippet).
        `tags`: fresh for every call unless a test pins them."""
        if not sources:
            return ""
        tags = tags or RecallTags.new()
        return (
            self.template("recall", version)
            .render(recall_tag=tags.name, recall_block=render_recall_block(sources, tags))
            .strip()
        )

    def eval_prompt(self, version: str) -> str:
        return self.template("eval", version).render().strip()
