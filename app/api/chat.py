"""`POST /v1/chat`: one authenticated turn, streamed as SSE (or as the AI SDK UI stream)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.responses import Response

from app.agent.opening import Gate
from app.agent.request import HistoryMessage, TurnRequest, TurnServices
from app.agent.streaming import stream_turn, stream_turn_batches
from app.agent.turn import Turn
from app.api.deps import CurrentUser, RuntimeDep
from app.api.errors import BODY_ERRORS, error_responses
from app.api.limiting import releasing
from app.api.project_scope import find_project
from app.api.streams import ui_stream
from app.api.streams.bounds import accepted_until, response_seconds
from app.api.streams.sse import event_stream_response
from app.conversations.repository import Conversation
from app.conversations.service import AfterTurn, TurnNotCurrent
from app.db.deadline import within
from app.errors import NotFound, PayloadTooLarge, ServiceUnavailable, Unprocessable
from app.operators.limits import Caller
from app.runtime import Runtime
from app.settings import Settings
from app.telemetry import register_sensitive

router = APIRouter(tags=["chat"])


class ChatBody(BaseModel):
    """`{"message": "...", "conversation_id": "..." | null, "replaces": "<turn_id>" | null,
    "project_id": "..." | null}`; any other field is refused. `replaces` (regenerate,
    edit-and-resend) needs the conversation. `project_id` starts a new conversation in one of
    the caller's projects; an existing conversation's project is its own (move it with PATCH).
    `temporary` starts a temporary chat (docs/privacy.md): a new conversation only."""

    model_config = ConfigDict(extra="forbid", strict=True)

    message: str
    conversation_id: str | None = None
    replaces: str | None = None
    project_id: str | None = None
    temporary: bool = False


@dataclass(frozen=True)
class ChatRequest:
    message: str
    conversation_id: str | None
    replaces: str | AfterTurn | None  # the AI SDK names a replaced turn by its place
    ai_sdk: bool
    project_id: str | None = None
    temporary: bool = False


def check_temporary(wanted: ChatRequest) -> None:
    """A temporary chat is asked for when it starts, outside projects; a conversation's later
    turns follow its own row (`Conversation.temporary`)."""
    if not wanted.temporary:
        return
    if wanted.conversation_id is not None:
        raise Unprocessable(
            "temporary: only a new conversation can be temporary; send it without "
            "conversation_id (a temporary conversation stays temporary).",
            code="temporary_conversation",
        )
    if wanted.project_id is not None:
        raise Unprocessable(
            "temporary: a temporary chat is outside projects; send it without project_id.",
            code="temporary_conversation",
        )


def parse_chat_body(payload: Mapping[str, Any]) -> ChatBody:
    try:
        body = ChatBody.model_validate(payload)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "body"
        raise Unprocessable(f"{where}: {first.get('msg', 'invalid')}") from None
    if body.replaces is not None and body.conversation_id is None:
        raise Unprocessable("replaces: names a turn of the conversation in conversation_id.")
    return body


def check_message(message: str, settings: Settings) -> None:
    """1..MAX_MESSAGE_CHARS characters of text, checked before anything is read or written."""
    if not message.strip():
        raise Unprocessable("message must contain text.")
    if "\x00" in message:
        # Refused rather than altered: PostgreSQL cannot store NUL in text, and a transcript
        # that silently differs from what was said is worse than a clear error.
        raise Unprocessable("message must not contain the NUL character (U+0000).")
    try:
        message.encode("utf-8")
    except UnicodeEncodeError:  # an unpaired surrogate, valid in JSON as "\ud800"
        raise Unprocessable("message must be valid Unicode text.") from None
    if len(message) > settings.max_message_chars:
        raise PayloadTooLarge(
            f"message holds {len(message):,} characters; at most "
            f"{settings.max_message_chars:,} are accepted."
        )


def read_request(request: Request, payload: Mapping[str, Any]) -> ChatRequest:
    """The turn asked for, in either protocol (the AI SDK's regenerate and edit name the turn
    they replace by its answer's id or by its place, `ui_stream.ui_replacement`)."""
    if ui_stream.wants_ui_stream(request.headers, request.query_params):
        message, conversation_id = ui_stream.parse_ui_request(payload)
        project_id = payload.get("project_id")
        if project_id is not None and not isinstance(project_id, str):
            raise Unprocessable("project_id must be a string.")
        temporary = payload.get("temporary", False)
        if not isinstance(temporary, bool):
            raise Unprocessable("temporary must be true or false.")
        replaces = ui_stream.ui_replacement(payload) if conversation_id is not None else None
        return ChatRequest(
            message, conversation_id, replaces, True, project_id=project_id, temporary=temporary
        )
    body = parse_chat_body(payload)
    return ChatRequest(
        body.message,
        body.conversation_id,
        body.replaces,
        ai_sdk=False,
        project_id=body.project_id,
        temporary=body.temporary,
    )


async def turn_project(
    runtime: Runtime, user_id: str, wanted: ChatRequest, conversation: Conversation | None
) -> tuple[str | None, str | None]:
    """The project the turn runs in, and its name: an existing conversation's own (from its
    row, read with its history: a `project_id` in the body that differs is refused), or for a
    new conversation the caller's project named in the body (another person's is a 404 like an
    unknown one)."""
    project_id = wanted.project_id
    if conversation is not None:
        if project_id is not None and project_id != conversation.project_id:
            raise Unprocessable(
                "project_id: the conversation is not in this project (move it with "
                "PATCH /v1/conversations/{id}).",
                code="project_mismatch",
            )
        project_id = conversation.project_id
    if project_id is None:
        return None, None
    project = await find_project(runtime, user_id, project_id)
    register_sensitive(project.name)
    return project.id, project.name


def respond(turn: Turn, ai_sdk: bool) -> Response:
    longest = response_seconds(turn.services.settings)
    if ai_sdk:
        return ui_stream.ui_message_response(stream_turn(turn), max_seconds=longest)
    return event_stream_response(stream_turn_batches(turn), max_seconds=longest)


async def load_history(
    runtime: Runtime, user_id: str, conversation_id: str, replaces: str | AfterTurn | None = None
) -> tuple[Conversation, tuple[HistoryMessage, ...], str | None]:
    """The caller's conversation, the recent messages of its current transcript (before the
    turn `replaces`, when the new turn replaces one) and the id of the turn it replaces;
    another user's id is simply absent. Bounded like the turn's memory read: a hanging database
    answers 503 in time."""
    try:
        found = await within(
            runtime.settings.memory_read_timeout_seconds,
            lambda: runtime.conversations.history(
                user_id, conversation_id, last=runtime.settings.history_messages, replaces=replaces
            ),
            what="history read",
        )
    except TurnNotCurrent:
        raise NotFound(
            "replaces: no such turn in this conversation (or it was already replaced).",
            code="turn_not_found",
        ) from None
    except Exception:
        raise ServiceUnavailable(
            "The conversation cannot be read right now; start a new one or retry."
        ) from None
    if found is None:
        raise NotFound("No such conversation.")
    conversation, stored, replaced = found
    history = tuple(
        HistoryMessage(message.role, message.content) for message in stored if message.content
    )
    return conversation, history, replaced


# The 200 answer is a stream of server-sent events (or the AI SDK UI message stream).
EVENT_STREAM: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The turn's events: start, delta, tool, memory, sources (what the "
        "answer was given and did), then done or error",
        "content": {
            "text/event-stream": {
                "schema": {
                    # One server-sent event (OpenAPI 3.1 reads `schema` as each event's schema).
                    "type": "object",
                    "required": ["data"],
                    "properties": {
                        "event": {
                            "enum": ["start", "delta", "tool", "memory", "sources", "done", "error"]
                        },
                        "data": {"type": "string", "contentMediaType": "application/json"},
                        "id": {"type": "string"},
                        "retry": {"type": "integer"},
                    },
                }
            }
        },
    }
}

ChatPayload = Annotated[
    dict[str, Any],
    Body(
        description='`{"message": str, "conversation_id": str | null, "replaces": str | null}` '
        "(extra fields are refused; `replaces`: the turn this one regenerates or edits), or an "
        "AI SDK `useChat` body when that protocol is selected.",
        examples=[{"message": "Remember that I prefer short answers.", "conversation_id": None}],
    ),
]


@router.post(
    "/v1/chat",
    summary="One chat turn, streamed (text/event-stream)",
    responses={**EVENT_STREAM, **error_responses(*BODY_ERRORS, 401, 404, 429, 503)},
)
async def chat(
    request: Request, user: CurrentUser, runtime: RuntimeDep, payload: ChatPayload
) -> Response:
    wanted = read_request(request, payload)
    check_temporary(wanted)
    check_message(wanted.message, runtime.settings)
    conversation: Conversation | None = None
    history: tuple[HistoryMessage, ...] = ()
    replaces: str | None = None
    if wanted.conversation_id is not None:
        conversation, history, replaces = await load_history(
            runtime, user.subject, wanted.conversation_id, wanted.replaces
        )
    project_id, project_name = await turn_project(runtime, user.subject, wanted, conversation)
    # A temporary chat's every turn: no memory read, no memory, search or recall offered.
    temporary = wanted.temporary or (conversation is not None and conversation.temporary)
    agent = await runtime.agents.chat()
    # Last before the stream: a refused turn answers 429 with nothing read or written.
    turn = await Turn.start(
        agent,
        TurnRequest(
            message=wanted.message,
            user_id=user.subject,
            conversation_id=wanted.conversation_id,
            history=history,
            replaces=replaces,
            project_id=project_id,
            project_name=project_name,
            temporary=temporary,
            accepted_until=accepted_until(user, runtime.settings),
            recall=True,
        ),
        TurnServices(
            settings=runtime.settings,
            memory=runtime.memory,
            flags=runtime.flags,
            conversations=runtime.conversations,
            search=runtime.conversations,
            control=runtime.control,
            usage=runtime.usage,
            limits=runtime.limits,  # the stream slot goes with the answer row
        ),
        Gate(runtime.limits, Caller.user(user.subject), runtime.user_limits()),
    )
    # A client that leaves before the turn runs: its stored message still gets its answer row.
    return releasing(respond(turn, wanted.ai_sdk), runtime, turn.admission, turn.unplayed)
