"""What a turn is asked to do and what it may use: the validated request and its services."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.agent.llm import DEFAULT_SAMPLING, Sampling
from app.conversations.service import ConversationService
from app.db.deadline import Later
from app.memory.control import MemoryControl
from app.memory.flags import FlagStore
from app.memory.provenance import SaveMode
from app.memory.rules import Snapshot
from app.memory.service import MemoryService
from app.operators.limits import Admission, LimitStore
from app.operators.usage import UsageStore
from app.settings import Settings

HistoryRole = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class HistoryMessage:
    """An earlier message. `system` ones come from a client that sends its own instructions:
    they follow the compiled system prompt, never replace it."""

    role: HistoryRole
    content: str


@dataclass(frozen=True)
class MessageWrite:
    """The user message's write as the turn's admission tried it, in its transaction
    (`opening.admit`, `LimitStore.admit_with`): into `conversation_id`, the existing
    conversation or the id a new one takes. `committed`: stored. Otherwise the opening stores
    it, looking first for a commit the failed try may have made all the same."""

    conversation_id: str
    committed: bool


# The caller's memory and save mode, read on the connection of the turn's admission once it
# has committed (`LimitStore.admit_with`), awaited by the turn's start.
MemoryRead = Later[tuple[Snapshot, SaveMode]]


@dataclass(frozen=True)
class TurnRequest:
    """A validated request. `user_id` is the verified subject; None on the memory-free route.
    `conversation_id` is an existing conversation the caller owns, or None to start one.
    `history` precedes `message`, in order; `sampling` holds the client's generation options."""

    message: str
    user_id: str | None
    conversation_id: str | None = None
    history: tuple[HistoryMessage, ...] = ()
    store_transcript: bool = True
    sampling: Sampling = DEFAULT_SAMPLING
    # The turn this one replaces in the conversation (regenerate, edit-and-resend): when the
    # message is stored, that turn and every later one become replaced versions, kept.
    replaces: str | None = None
    # The project the turn runs in: the conversation's (from its row), or for a new one the
    # caller's project it starts in, checked as theirs by the route. None: outside projects.
    project_id: str | None = None
    project_name: str | None = None
    # A temporary chat (docs/privacy.md): the turn reads no memory and is offered no memory,
    # search or recall; its conversation row says so (`Conversation.temporary`).
    temporary: bool = False
    # The three below are set by the turn's start (`Turn.start`, `opening.admit`), never by a
    # route. The admission that took the turn's stream slot: the transaction of the turn's
    # answer row frees the slot (`LimitStore.release_with`). None: not admitted yet.
    admission: Admission | None = None
    # The user message's write, as the admission tried it (None: the turn stores no message).
    written: MessageWrite | None = None
    # The memory read begun after the admission: the opening awaits it instead of reading
    # (None: it reads, when the turn reads memory at all).
    memory_read: MemoryRead | None = None
    # When the caller's token stops being accepted (epoch seconds): the turn ends there with
    # `token_expired`, as it ends at its deadline. None: no token (the evaluation route).
    accepted_until: float | None = None
    # Whether the turn may recall earlier chats, when the person has it on (app/agent/recall.py):
    # only /v1/chat asks; other routes keep their own history.
    recall: bool = False

    @property
    def stored_in(self) -> str | None:
        """The conversation the admission stored the message in (None: the opening stores it,
        or the turn stores none)."""
        written = self.written
        return written.conversation_id if written is not None and written.committed else None


@dataclass(frozen=True)
class TurnServices:
    """What the turn may touch. The memory-free route passes settings only: with no memory
    service, flag store or transcript, nothing there can be read or written. `search` is the
    transcript store the conversation_search tool reads (None: the tool is not offered).
    `usage` records a turn's tokens when no transcript row carries them (None: not recorded)."""

    settings: Settings
    memory: MemoryService | None = None
    flags: FlagStore | None = None
    conversations: ConversationService | None = None
    search: ConversationService | None = None
    # Where the person's save mode is read at turn start, so that the model is told whether
    # its edits are saved or held for approval (None: not read, the mode is unknown).
    control: MemoryControl | None = None
    usage: UsageStore | None = None
    # Frees the turn's stream slot with its answer row (None: the route frees it on its own).
    limits: LimitStore | None = None
