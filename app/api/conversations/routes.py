"""The caller's conversation transcripts: list, search, read, rename, delete. Another user's id
is a 404; a search reads the caller's messages only."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, model_validator
from starlette.responses import Response

from app.agent.sources import stored_sources
from app.api.conversations import cursor
from app.api.deps import CurrentUser, RuntimeDep
from app.api.errors import error_responses
from app.api.project_scope import NO_PROJECT, ProjectQuery, project_write_unavailable
from app.api.timestamps import iso_utc
from app.concurrency import to_thread
from app.conversations.repository import Conversation, ListPosition, StoredMessage
from app.conversations.search import MAX_RESULTS
from app.conversations.search_text import query_problem
from app.conversations.service import SearchResult, is_conversation_id
from app.conversations.titles import TitleError, checked_title
from app.db.deadline import DeadlineExceededError, within
from app.errors import NotFound, ServiceUnavailable, Unprocessable
from app.memory.projects import ProjectNotFoundError

router = APIRouter(tags=["conversations"])


def _summary(conversation: Conversation) -> dict[str, Any]:
    return {
        "id": conversation.id,
        "title": conversation.title,
        "created_at": iso_utc(conversation.created_at),
        "updated_at": iso_utc(conversation.updated_at),
        "project_id": conversation.project_id,
        "pinned": conversation.pinned,
        "archived": conversation.archived,
    }


# The most a page of the list holds; without `limit` the list is whole, as before pages existed.
MAX_PAGE = 100


@router.get(
    "/v1/conversations",
    summary=(
        "The caller's conversations (of one project with ?project_id=), pinned first, then "
        "newest first; archived ones only with ?archived=true; paged with limit and before"
    ),
    responses=error_responses(401, 404, 422, 503),
)
async def list_conversations(
    user: CurrentUser,
    runtime: RuntimeDep,
    where: ProjectQuery,
    archived: bool = Query(default=False, description="List the archived conversations instead"),
    limit: int | None = Query(default=None, ge=1, le=MAX_PAGE, description="At most this many"),
    before: str | None = Query(
        default=None, description="The `next` of the previous page: the page after it"
    ),
) -> dict[str, Any]:
    try:
        after = cursor.decode(before) if before is not None else None
    except cursor.CursorError:
        raise Unprocessable(
            "before is not a cursor of this list: pass the previous page's next.",
            code="invalid_cursor",
        ) from None
    conversations = await runtime.conversations.list_for(
        user.subject,
        where.scope.project_id,
        archived=archived,
        limit=limit + 1 if limit is not None else None,  # one more says whether a page follows
        after=after,
    )
    body: dict[str, Any] = {"conversations": [_summary(c) for c in conversations[:limit]]}
    if limit is not None:
        last = conversations[limit - 1] if len(conversations) > limit else None
        body["next"] = (
            cursor.encode(ListPosition(last.pinned, last.updated_at, last.id))
            if last is not None
            else None
        )
    return body


def _result(result: SearchResult) -> dict[str, Any]:
    return {
        "conversation_id": result.conversation_id,
        "message_id": result.message_id,
        "title": result.title,
        "role": result.role,
        "snippet": result.snippet,
        "created_at": iso_utc(result.created_at),
        "score": round(result.score, 6),
    }


# Declared before /v1/conversations/{conversation_id}, which would otherwise take "search".
@router.get(
    "/v1/conversations/search",
    summary=(
        "Search the caller's messages (of one project with ?project_id=): any word may match, "
        'best match first, ties newest first; "quoted words" as a phrase'
    ),
    responses=error_responses(401, 404, 422, 503),
)
async def search_conversations(
    user: CurrentUser,
    runtime: RuntimeDep,
    where: ProjectQuery,
    q: str = Query(default="", description="Any text: searched as words, never as syntax"),
    limit: int = Query(default=10, ge=1, le=MAX_RESULTS),
) -> dict[str, Any]:
    if not q.strip():
        raise Unprocessable("Give the text to search for in q.", code="empty_query")
    problem = query_problem(q)
    if problem is not None:
        raise Unprocessable(f"q: {problem}", code="invalid_query")
    seconds = runtime.settings.search_timeout_seconds
    project = where.scope.project_id
    try:
        results = await within(
            seconds,
            lambda: (
                runtime.conversations.search(user.subject, q, limit, project=project)
                if project is not None
                else runtime.conversations.search(user.subject, q, limit)
            ),
            what="conversation search",
        )
    except DeadlineExceededError as error:
        raise ServiceUnavailable("Search is unavailable right now; try again.") from error
    return {"results": [_result(result) for result in results]}


@router.get(
    "/v1/conversations/{conversation_id}",
    summary="One conversation with its messages",
    responses=error_responses(401, 404, 503),
)
async def read_conversation(
    conversation_id: str, user: CurrentUser, runtime: RuntimeDep
) -> dict[str, Any]:
    conversation = await runtime.conversations.get(user.subject, conversation_id)
    messages = await runtime.conversations.messages(user.subject, conversation_id)
    if conversation is None or messages is None:
        raise NotFound("No such conversation.")
    return {
        **_summary(conversation),
        # A temporary chat is shown to its owner by id only (never listed or searched).
        "temporary": conversation.temporary,
        # The id search results and an answer's sources name as `message_id` (not in the export).
        "messages": [{"id": message.id, **message_view(message)} for message in messages],
    }


def message_view(message: StoredMessage) -> dict[str, Any]:
    """A stored message as the API shows it: here and in the memory export."""
    view: dict[str, Any] = {
        "role": message.role,
        "content": message.content,
        "status": message.status,
        "turn_id": message.turn_id,
        "created_at": iso_utc(message.created_at),
        "superseded_by": message.superseded_by,  # regenerate, edit
    }
    if message.role == "assistant":
        # What the answer's prompt held, the snippets it was given, the changes it made
        # (null: none recorded, e.g. an answer from before sources, or one that failed).
        view["sources"] = stored_sources(message.sources)
    return view


class ConversationChange(BaseModel):
    """`{"title": "..."}`, `{"project_id": "<id>" | null}` (move it into a project or out of
    projects), `{"pinned": bool}`, `{"archived": bool}`, or several; any other field is
    refused."""

    model_config = ConfigDict(extra="forbid", strict=True)

    title: str | None = None
    project_id: str | None = None
    pinned: bool | None = None
    archived: bool | None = None

    @model_validator(mode="after")
    def _something(self) -> ConversationChange:
        if (
            self.title is None
            and self.pinned is None
            and self.archived is None
            and "project_id" not in self.model_fields_set
        ):
            raise ValueError("give a title, a project_id (or null), pinned, archived, or several")
        return self


async def move(
    runtime: RuntimeDep, user_id: str, conversation_id: str, project_id: str | None
) -> None:
    """Move the caller's conversation into their project (or out of projects), under their
    writer lock, so that the project cannot be deleted in between (a 404 if it is gone)."""
    if project_id is not None and not is_conversation_id(project_id):
        raise NotFound(NO_PROJECT)  # project ids are uuid4 text too
    try:
        moved = await to_thread(
            runtime.memory.move_conversation, user_id, conversation_id, project_id
        )
    except ProjectNotFoundError:
        raise NotFound(NO_PROJECT) from None
    except Exception as error:
        raise project_write_unavailable(error) from None
    if moved is None:
        raise NotFound("No such conversation.")


@router.patch(
    "/v1/conversations/{conversation_id}",
    summary=(
        "Rename one conversation, move it into a project or out of projects, pin or archive it"
    ),
    responses=error_responses(401, 404, 422, 503),
)
async def change_conversation(
    conversation_id: str, body: ConversationChange, user: CurrentUser, runtime: RuntimeDep
) -> dict[str, Any]:
    title = None
    if body.title is not None:
        try:
            title = checked_title(body.title)
        except TitleError as error:
            raise Unprocessable(str(error), code="invalid_title") from None
    if "project_id" in body.model_fields_set:
        await move(runtime, user.subject, conversation_id, body.project_id)
    if body.pinned is not None or body.archived is not None:
        marked = await runtime.conversations.mark(
            user.subject, conversation_id, pinned=body.pinned, archived=body.archived
        )
        if marked is None:
            raise NotFound("No such conversation.")
    conversation = (
        await runtime.conversations.rename(user.subject, conversation_id, title)
        if title is not None
        else await runtime.conversations.get(user.subject, conversation_id)
    )
    if conversation is None:
        raise NotFound("No such conversation.")
    return _summary(conversation)


@router.delete(
    "/v1/conversations/{conversation_id}",
    status_code=204,
    summary="Delete one conversation",
    responses=error_responses(401, 404, 503),
)
async def delete_conversation(
    conversation_id: str, user: CurrentUser, runtime: RuntimeDep
) -> Response:
    if not await runtime.conversations.delete(user.subject, conversation_id):
        raise NotFound("No such conversation.")
    return Response(status_code=204)
