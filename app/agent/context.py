"""The one explicit object a chat turn carries: identity, memory status, ledger, cancel event."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

from app.agent.events import TranscriptStatus
from app.agent.sources import TurnSources
from app.concurrency import CancelFlag
from app.conversations.service import ConversationService
from app.memory.ledger import MemoryLedger
from app.memory.provenance import SaveMode
from app.memory.render import MemoryStatus
from app.memory.rules import GENERAL_TARGETS, Snapshot, Target

# After this many rejected memory calls in one turn the tool tells the model to stop trying.
MAX_REJECTED_CALLS = 3


def new_turn_id() -> str:
    return str(uuid.uuid4())


@dataclass
class TurnContext:
    """Request-local state of one turn, handed to tools; never stored at module level.

    `user_id` is the verified subject (None on the memory-free route): within a turn it is the
    only carrier of the owner, and no tool argument can name another. `ledger` exists only when
    memory was read successfully and the flag is on, so it alone decides whether this turn may
    stage writes: a read error never yields an empty writable snapshot. `baseline` is the
    snapshot read at turn start (also while the flag is off, for the counts users see; empty
    when it could not be read, and then `baseline_read` is False: its counts are not the stored
    ones). `opened_at` is when the turn began, on the flag store's clock. `transcript_status`
    says whether the user's message was stored (the client is told in `start`).
    """

    turn_id: str
    conversation_id: str | None
    user_id: str | None
    memory_status: MemoryStatus
    ledger: MemoryLedger | None
    baseline: Snapshot = field(default_factory=Snapshot)
    baseline_read: bool = True
    transcript_status: TranscriptStatus = "disabled"
    cancel_event: CancelFlag = field(default_factory=CancelFlag)
    opened_at: float | None = None
    # Wall-clock UTC when the turn began: an erasure of the user since then leaves its commit
    # nothing to write (app/memory/writes.py).
    begun_at: datetime | None = None
    rejected_calls: int = 0
    # The transcripts conversation_search reads (the owner's, by `user_id`); None: not offered.
    search: ConversationService | None = None
    search_timeout_seconds: float = 2.0
    # The person's save mode as read at turn start ("ask": staged edits become a proposal they
    # review); None when unknown. It words the tool's result and the prompt, nothing more.
    save_mode: SaveMode | None = None
    # The project the turn runs in (the conversation's), and its name for the prompt; None
    # outside projects. Memory, search and the commit are scoped by it, never by an argument.
    project_id: str | None = None
    project_name: str | None = None
    # What the turn's model was given and what the turn did (app/agent/sources.py).
    sources: TurnSources = field(default_factory=TurnSources)

    @property
    def memory_targets(self) -> tuple[Target, ...]:
        """The documents the memory tool may name this turn: those of the scope read at turn
        start; when memory could not be read in a project, the project's least (user and
        project: the general document is never offered on a guess)."""
        if self.baseline_read and self.memory_status != "disabled":
            return self.baseline.targets
        return ("user", "project") if self.project_id is not None else GENERAL_TARGETS

    @property
    def memory_tool_offered(self) -> bool:
        """The tool is offered whenever the flag is on; while memory is unavailable it answers
        that nothing can be saved rather than silently disappearing."""
        return self.user_id is not None and self.memory_status != "disabled"

    @property
    def search_tool_offered(self) -> bool:
        """Search reads transcripts, not memory: offered whatever the memory status."""
        return self.user_id is not None and self.search is not None

    @property
    def writes_enabled(self) -> bool:
        return self.user_id is not None and self.ledger is not None

    @property
    def staged(self) -> bool:
        return self.ledger is not None and self.ledger.staged

    @property
    def rejection_limit_reached(self) -> bool:
        return self.rejected_calls >= MAX_REJECTED_CALLS
