"""`/openai/v1`: the same authenticated turn as `/v1/chat`, spoken in the chat-completions wire
format, so that chat clients people already run (Open WebUI, LibreChat, the OpenAI SDKs) get
bounded, private memory by pointing their base URL and API key (a bearer token) here.

Nothing is stored as a conversation on this prefix: the client's messages are the history. Every
answer under the prefix, errors included, has OpenAI's shape, so the SDKs raise their own typed
errors (401 AuthenticationError, 400 BadRequestError, 404 NotFoundError).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncGenerator
from typing import Any

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.agent.events import TurnEvent
from app.agent.openai_wire import AnswerCollector, ChunkEncoder, Completion
from app.agent.request import TurnRequest, TurnServices
from app.agent.streaming import stream_turn
from app.agent.turn import Turn
from app.api.bodies import json_object
from app.api.deps import CurrentUser, RuntimeDep, SettingsDep
from app.api.limiting import releasing
from app.api.openai_errors import CLIENT_CLOSED, OpenAIRoute
from app.api.openai_request import WireError, parse_completion_request
from app.api.openai_schema import (
    COMPLETION_RESPONSES,
    REQUEST_BODY,
    ModelCard,
    ModelList,
    openai_errors,
)
from app.api.sse import (
    PING_SECONDS,
    SEND_TIMEOUT_SECONDS,
    EventStreamResponse,
    wait_for_disconnect,
)
from app.api.ui_stream import sse_data
from app.operators.limits import Caller

PREFIX = "/openai/v1"
OWNER = "agent-memory"
STARTED = int(time.time())  # the listed model's `created`: when this process started
STREAM_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
# The SDKs retry 5xx answers; a turn that ran out of time would only run out of time again.
NO_RETRY = {"x-should-retry": "false"}


router = APIRouter(prefix=PREFIX, tags=["openai-compatible"], route_class=OpenAIRoute)


# -- models ---------------------------------------------------------------------------------------


def model_card(model_id: str) -> ModelCard:
    return ModelCard(id=model_id, created=STARTED, owned_by=OWNER)


@router.get(
    "/models",
    summary="The model this service answers with (OpenAI models list)",
    response_model=ModelList,
    responses=openai_errors(401, 503),
)
async def list_models(_user: CurrentUser, settings: SettingsDep) -> ModelList:
    return ModelList(data=[model_card(settings.llm_model)])


@router.get(
    "/models/{model_id:path}",
    summary="One model (OpenAI models retrieve)",
    response_model=ModelCard,
    responses=openai_errors(401, 404, 503),
)
async def retrieve_model(model_id: str, _user: CurrentUser, settings: SettingsDep) -> ModelCard:
    if model_id != settings.llm_model:
        raise WireError(
            404,
            f"This service serves one model, {settings.llm_model!r}.",
            code="model_not_found",
            param="model",
        )
    return model_card(model_id)


# -- chat completions -----------------------------------------------------------------------------


@router.post(
    "/chat/completions",
    summary="One chat turn with memory (OpenAI chat completions, streamed or not)",
    responses=COMPLETION_RESPONSES,
    openapi_extra=REQUEST_BODY,
)
async def chat_completions(request: Request, user: CurrentUser, runtime: RuntimeDep) -> Response:
    settings = runtime.settings
    wanted = parse_completion_request(
        json_object(await request.body()),  # its errors answer 400 in OpenAI's shape
        model_id=settings.llm_model,
        max_message_chars=settings.max_message_chars,
    )
    agent = await runtime.agents.chat()
    admission = await runtime.limits.admit(Caller.user(user.subject), runtime.user_limits())
    turn = Turn(
        agent,
        TurnRequest(
            message=wanted.message,
            user_id=user.subject,
            history=wanted.history,
            store_transcript=False,  # the client keeps the conversation
            sampling=wanted.sampling,
        ),
        # No conversation service: nothing on this route is stored as a transcript; the search
        # tool still reads the caller's transcripts that /v1/chat stored.
        TurnServices(
            settings=settings,
            memory=runtime.memory,
            flags=runtime.flags,
            search=runtime.conversations,  # the same turn: it may search stored transcripts
            control=runtime.control,  # the save mode: the model says "saved" only when it is
            usage=runtime.usage,  # no transcript row here: the turn's usage is stored alone
        ),
    )
    completion = Completion(
        id=f"chatcmpl-{turn.turn_id.replace('-', '')}",
        created=int(time.time()),
        model=wanted.model,
    )
    if wanted.stream:
        encoder = ChunkEncoder(completion, include_usage=wanted.include_usage)
        streamed = EventStreamResponse(
            _chunks(stream_turn(turn), encoder),
            ping=PING_SECONDS,
            send_timeout=SEND_TIMEOUT_SECONDS,
            sep="\n",
            headers=STREAM_HEADERS,
        )
        return releasing(streamed, runtime, admission)
    return releasing(
        AnswerResponse(stream_turn(turn), AnswerCollector(completion)), runtime, admission
    )


def _data(chunk: dict[str, Any]) -> bytes:
    return sse_data(json.dumps(chunk, ensure_ascii=False, separators=(",", ":")))


async def _chunks(
    events: AsyncGenerator[TurnEvent, None], encoder: ChunkEncoder
) -> AsyncGenerator[bytes, None]:
    # A disconnect makes the response close this generator, which closes the turn's stream and
    # so cancels the turn: its staged memory is discarded.
    async with contextlib.aclosing(events) as stream:
        async for event in stream:
            for chunk in encoder.encode(event):
                yield _data(chunk)
    for chunk in encoder.close():
        yield _data(chunk)
    yield sse_data("[DONE]")


class AnswerResponse(Response):
    """A non-streamed answer. The turn runs while this response is being served, watching the
    connection: a client that leaves before the answer cancels the turn, so nothing is
    committed. Status and body are sent once the turn has ended."""

    def __init__(self, events: AsyncGenerator[TurnEvent, None], collector: AnswerCollector) -> None:
        super().__init__(media_type="application/json")
        self.events = events
        self.collector = collector

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer: tuple[int, dict[str, Any]] | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(_cancel_on_disconnect, receive, group.cancel_scope)
            async with contextlib.aclosing(self.events) as events:
                async for event in events:
                    self.collector.add(event)
            answer = self.collector.result()
            group.cancel_scope.cancel()  # stop watching: the answer is ready
        if answer is None:
            # The client left; the turn was cancelled and committed nothing. The server drops
            # what is sent to a closed connection, but the access log and the span record 499
            # (client closed request) rather than a 500 that never happened.
            await Response(status_code=CLIENT_CLOSED)(scope, receive, send)
            return
        status, body = answer
        headers = NO_RETRY if status == 504 else None
        await JSONResponse(body, status_code=status, headers=headers)(scope, receive, send)


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    await wait_for_disconnect(receive)
    scope.cancel()
