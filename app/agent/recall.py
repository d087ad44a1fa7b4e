"""Recall of earlier chats: before the model's first round, the few snippets of the person's
earlier conversations most relevant to their message, for the turn's recall block.

Only for a person who turned it on (`recall_chats`, RECALL_CHATS_DEFAULT until they choose), on
the route that asks for it (`TurnRequest.recall`: /v1/chat; never the evaluation route, which has
no person), and only where conversation search is offered (so never where the turn may not
read transcripts). The search is the conversation search's, with its scoping: the owner's
messages only, the turn's project only (outside projects, only conversations in none); the
current conversation is left out here. The snippets go to the prompt and the turn's sources,
never to memory. Fail-open: a preference or search that fails or passes SEARCH_TIMEOUT_SECONDS
leaves the turn without recall; the turn goes on.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import structlog

from app.agent.context import TurnContext
from app.agent.recall_block import fitting
from app.agent.request import TurnRequest, TurnServices
from app.agent.search_tool import given_source
from app.agent.sources import ConversationSource
from app.conversations.search_text import MAX_QUERY_CHARS
from app.conversations.service import SearchResult
from app.db.deadline import within

log = structlog.get_logger(__name__)

# Results asked for beyond the wanted snippets: the current conversation's are dropped here.
EXTRA_RESULTS = 5

# The search recall runs (the interface it depends on): the owner's best matches for a query,
# in one project's conversations (None: those outside projects), one turn left out.
RecallSearch = Callable[[str, str, int, str | None, str], Awaitable[list[SearchResult]]]


def search_of(services: TurnServices) -> RecallSearch | None:
    search = services.search
    if search is None:
        return None

    def run(
        user_id: str, query: str, limit: int, project: str | None, turn_id: str
    ) -> Awaitable[list[SearchResult]]:
        return search.search(user_id, query, limit, exclude_turn_id=turn_id, project=project)

    return run


async def recall_for_turn(
    ctx: TurnContext, request: TurnRequest, services: TurnServices
) -> tuple[ConversationSource, ...]:
    """The snippets this turn recalls (empty when recall is off, not offered or failed)."""
    search, control, user_id = search_of(services), services.control, ctx.user_id
    if not request.recall or user_id is None or search is None or control is None:
        return ()
    if not ctx.search_tool_offered:
        return ()
    started = time.perf_counter()
    settings = services.settings
    try:
        chosen = await within(
            settings.search_timeout_seconds,
            lambda: control.recall_chats(user_id),
            what="recall preference",
        )
        if not (settings.recall_chats_default if chosen is None else chosen):
            return ()
        results = await within(
            settings.search_timeout_seconds,
            lambda: search(
                user_id,
                request.message[:MAX_QUERY_CHARS],
                settings.recall_max_snippets + EXTRA_RESULTS,
                ctx.project_id,
                ctx.turn_id,
            ),
            what="recall search",
        )
    except Exception as error:  # DeadlineExceededError or any database failure: fail open
        log.warning("recall.failed", turn_id=ctx.turn_id, error_type=type(error).__name__)
        return ()
    earlier = [
        given_source(result, "recall")
        for result in results
        if result.conversation_id != ctx.conversation_id
    ][: settings.recall_max_snippets]
    recalled = fitting(earlier, settings.recall_max_chars)
    log.info(
        "recall.done",
        turn_id=ctx.turn_id,
        snippet_count=len(recalled),
        duration_ms=round((time.perf_counter() - started) * 1000, 1),
    )
    return recalled
