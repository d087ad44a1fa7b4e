"""The caller's memory history, undo and export. Every route takes its owner from the verified
token; another user's change id answers 404 exactly like an unknown one."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from datetime import UTC, datetime
from typing import Any

import structlog
from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from starlette.responses import Response

from app.api.conversations.routes import message_view
from app.api.deps import CurrentUser, MemoryScope, RuntimeDep
from app.api.errors import error_responses, unavailable_on_failure
from app.api.limiting import releasing
from app.api.memory.commit import commit_change, is_issued_id
from app.api.memory.entries import MemoryState, memory_state, require_writes
from app.api.memory.failures import memory_unavailable
from app.api.project_scope import ProjectQuery
from app.api.projects import project_view
from app.api.streams.bounds import BoundedDownload, seconds_left
from app.api.timestamps import iso_utc
from app.errors import NotFound, Unprocessable
from app.memory.control import ExportHead, MemoryControl
from app.memory.provenance import HistoryEntry, Proposal, Provenance, change_view, operation_view
from app.memory.rules import rendered_length
from app.operators.limits import Caller

logger = structlog.get_logger(__name__)

router = APIRouter(prefix="/v1/memory", tags=["memory"])

MAX_PAGE = 200


def history_view(entry: HistoryEntry) -> dict[str, Any]:
    provenance = entry.provenance
    view: dict[str, Any] = {
        "id": entry.id,
        "created_at": iso_utc(entry.created_at),
        "source": provenance.source,
    }
    for key in ("turn_id", "conversation_id", "undoes", "client"):
        value = getattr(provenance, key)
        if value is not None:
            view[key] = value
    if entry.project_id is not None:
        view["project_id"] = entry.project_id
    view["operations"] = [change_view(change) for change in entry.changes]
    return view


def proposal_view(proposal: Proposal) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": proposal.id,
        "created_at": iso_utc(proposal.created_at),
        "expires_at": iso_utc(proposal.expires_at),
        "source": proposal.proposer,
        "turn_id": proposal.turn_id,
        "conversation_id": proposal.conversation_id,
        "operations": [operation_view(operation) for operation in proposal.operations],
    }
    if proposal.client is not None:
        view["client"] = proposal.client
    if proposal.project_id is not None:
        view["project_id"] = proposal.project_id
    return view


@router.get(
    "/history",
    summary="The caller's memory changes in one scope, newest first",
    responses=error_responses(401, 404, 422, 503),
)
async def read_history(
    scope: MemoryScope,
    runtime: RuntimeDep,
    where: ProjectQuery,
    limit: int = Query(50, ge=1, le=MAX_PAGE),
    before: str | None = Query(None, max_length=64),
) -> dict[str, Any]:
    if before is not None and not is_issued_id(before):
        raise Unprocessable("before must be the id of one of your changes.", code="invalid_cursor")
    with unavailable_on_failure(logger, "memory.history_failed", memory_unavailable):
        # One more than asked: whether there is a next page, without a second query.
        entries = await runtime.control.history(
            scope.user_id, limit=limit + 1, before=before, project_id=where.scope.project_id
        )
    if entries is None:
        raise Unprocessable("before must be the id of one of your changes.", code="invalid_cursor")
    page = entries[:limit]
    more = len(entries) > limit
    return {
        "changes": [history_view(entry) for entry in page],
        "next": page[-1].id if more and page else None,
    }


@router.post(
    "/history/{change_id}/undo",
    response_model=MemoryState,
    response_model_exclude_none=True,
    summary="Apply the inverse of one change, as a new change",
    responses=error_responses(401, 404, 409, 422, 503),
)
async def undo_change(
    change_id: str, request: Request, scope: MemoryScope, runtime: RuntimeDep, where: ProjectQuery
) -> MemoryState:
    require_writes(request, scope)
    if not is_issued_id(change_id):
        raise NotFound("No such change.")
    result = await commit_change(
        runtime,
        scope.user_id,
        provenance=Provenance("undo", undoes=change_id),
        missing="No such change.",
        scope=where.scope,
    )
    return memory_state(result.snapshot, where=where)


@router.get(
    "/export",
    summary="Everything kept about the caller, as one JSON download",
    responses=error_responses(401, 404, 429, 503),
    response_class=StreamingResponse,
)
async def export_memory(
    user: CurrentUser, scope: MemoryScope, runtime: RuntimeDep, _where: ProjectQuery
) -> Response:
    """Streamed: the bounded parts are read first (a database that cannot answer is a `503`
    before anything is sent), then the history and the conversations a page at a time, each
    written as it is read, so memory stays bounded whatever the transcript's size. A failure
    midway ends the download short (its JSON unfinished), never with a body that looks whole.
    The download holds one of the person's stream slots while it runs (429 past the limit) and
    ends short at STREAM_MAX_SECONDS or when the token stops being accepted
    (app/api/streams/bounds.py)."""
    admission = await runtime.limits.admit(Caller.user(user.subject), runtime.download_limits())
    try:
        head = await runtime.control.export_head(scope.user_id)
    except Exception as error:
        await runtime.limits.release(admission)
        logger.warning("memory.export_failed", error=type(error).__name__)
        raise memory_unavailable() from None
    exported_at = datetime.now(UTC)
    stamp = exported_at.strftime("%Y%m%dT%H%M%SZ")
    download = BoundedDownload(
        _chunks(
            _export_body(runtime.control, scope.user_id, head, exported_at, scope.writes_enabled)
        ),
        seconds=seconds_left(user, runtime.settings),
        media_type="application/json",
        headers={
            "Content-Disposition": f'attachment; filename="memory-export-{stamp}.json"',
            "Cache-Control": "no-store",
        },
    )
    return releasing(download, runtime, admission)


# The export's pieces (a row each) go out joined into chunks of about this size: one send per
# chunk through the middleware and the server instead of one per row; memory stays bounded.
EXPORT_CHUNK_BYTES = 65_536


async def _chunks(pieces: AsyncGenerator[bytes, None]) -> AsyncIterator[bytes]:
    """`pieces` joined into chunks of at least EXPORT_CHUNK_BYTES (the last one smaller). A
    failure drops what was held, so the body still ends short, never looking whole."""
    held: list[bytes] = []
    size = 0
    async with aclosing(pieces):
        async for piece in pieces:
            held.append(piece)
            size += len(piece)
            if size >= EXPORT_CHUNK_BYTES:
                yield b"".join(held)
                held.clear()
                size = 0
    if size:
        yield b"".join(held)


def _json(value: Any) -> str:
    # As JSONResponse renders: compact, UTF-8 as it is.
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


async def _export_body(
    control: MemoryControl,
    user_id: str,
    head: ExportHead,
    exported_at: datetime,
    writes_enabled: bool,
) -> AsyncGenerator[bytes, None]:
    """The export's JSON, piece by piece: the same document as one `json.dumps` of it."""
    opening = {
        "exported_at": iso_utc(exported_at),
        "subject": user_id,
        "memory": memory_state(head.snapshot, enabled=writes_enabled).model_dump(),
        "settings": {"save_mode": head.save_mode, "recall_chats": head.recall_chats},
        "projects": [
            {
                **project_view(project),
                "memory": {
                    "entries": list(entries),
                    "characters": rendered_length(entries),
                },
            }
            for project, entries in head.projects
        ],
    }
    changes = conversations = 0
    try:
        yield (_json(opening)[:-1] + ',"history":[').encode()
        async for entry in control.export_history(user_id):
            yield (("," if changes else "") + _json(history_view(entry))).encode()
            changes += 1
        proposals = _json([proposal_view(proposal) for proposal in head.proposals])
        # Not actionable any more, but stored until removed: a person takes them too.
        expired = _json([proposal_view(proposal) for proposal in head.expired_proposals])
        usage = _json(head.usage)
        yield (
            f'],"proposals":{proposals},"expired_proposals":{expired},"usage":{usage},'
            '"conversations":['
        ).encode()
        async for conversation in control.export_conversations(user_id):
            described = {
                "id": conversation.id,
                "title": conversation.title,
                "created_at": iso_utc(conversation.created_at),
                "updated_at": iso_utc(conversation.updated_at),
                "project_id": conversation.project_id,
            }
            prefix = "," if conversations else ""
            yield (prefix + _json(described)[:-1] + ',"messages":[').encode()
            first = True
            async for message in control.export_messages(conversation):
                yield (("" if first else ",") + _json(message_view(message))).encode()
                first = False
            yield b"]}"
            conversations += 1
        yield b"]}"
    except Exception as error:
        # The status is sent: ending the body short is how the client learns it is incomplete.
        logger.warning("memory.export_failed", error=type(error).__name__, midway=True)
        raise
    logger.info("memory.exported", changes=changes, conversations=conversations)
