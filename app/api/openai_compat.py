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

from app.agent.events import DoneEvent, TurnEvent
from app.agent.openai_wire import AnswerCollector, ChunkEncoder, Completion
from app.agent.opening import Gate
from app.agent.request import TurnRequest, TurnServices
from app.agent.streaming import stream_turn
from app.agent.turn import Turn
from app.api.bodies import json_object
from app.api.deps import CurrentUser, RuntimeDep
from app.api.limiting import releasing
from app.api.openai.errors import CLIENT_CLOSED, OpenAIRoute
from app.api.openai.schema import (
    COMPLETION_RESPONSES,
    REQUEST_BODY,
    ModelCard,
    ModelList,
    openai_errors,
)
from app.api.openai_request import (
    WireError,
    parse_completion_request,
    project_model_id,
    split_model,
)
from app.api.streams.bounds import accepted_until, response_seconds, timed_send
from app.api.streams.sse import (
    PING_SECONDS,
    SEND_TIMEOUT_SECONDS,
    EventStreamResponse,
    sse_data,
    wait_for_disconnect,
)
from app.concurrency import to_thread
from app.conversations.service import is_conversation_id
from app.memory.projects import Project
from app.operators.limits import Caller
from app.runtime import Runtime
from app.telemetry import register_sensitive

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


PROJECT_HEADER = "X-Project-Id"
NO_PROJECT = "No such project."


async def _caller_project(runtime: Runtime, user_id: str, project_id: str) -> Project:
    """The caller's project, or 404 in OpenAI's shape (another person's reads as unknown)."""
    project = None
    if is_conversation_id(project_id):  # project ids are uuid4 text too
        try:
            project = await to_thread(runtime.memory.get_project, user_id, project_id)
        except Exception as error:
            raise WireError(
                503, "Projects cannot be read right now.", code="service_unavailable"
            ) from error
    if project is None:
        raise WireError(404, NO_PROJECT, code="project_not_found", param="model")
    return project


async def request_project(
    request: Request, runtime: Runtime, user_id: str, from_model: str | None
) -> Project | None:
    """The turn's project: the `X-Project-Id` header or the model id's `/project/<id>`; both
    given and different is 400."""
    header = request.headers.get(PROJECT_HEADER)
    if header is not None and from_model is not None and header != from_model:
        raise WireError(
            400,
            f"The {PROJECT_HEADER} header and the model id name different projects.",
            code="project_mismatch",
            param="model",
        )
    project_id = header if header is not None else from_model
    if project_id is None:
        return None
    project = await _caller_project(runtime, user_id, project_id)
    register_sensitive(project.name)
    return project


@router.get(
    "/models",
    summary="The model this service answers with, and one id per project of the caller",
    response_model=ModelList,
    responses=openai_errors(401, 503),
)
async def list_models(user: CurrentUser, runtime: RuntimeDep) -> ModelList:
    """The base model, then `<model>/project/<id>` for each of the caller's projects, oldest
    first: a chat client's model menu is how its users pick a project."""
    model_id = runtime.settings.llm_model
    try:
        found = await to_thread(runtime.memory.list_projects, user.subject)
    except Exception as error:
        raise WireError(
            503, "Projects cannot be read right now.", code="service_unavailable"
        ) from error
    cards = [model_card(model_id)]
    cards.extend(model_card(project_model_id(model_id, project.id)) for project in found)
    return ModelList(data=cards)


@router.get(
    "/models/{model_id:path}",
    summary="One model (OpenAI models retrieve)",
    response_model=ModelCard,
    responses=openai_errors(401, 404, 503),
)
async def retrieve_model(model_id: str, user: CurrentUser, runtime: RuntimeDep) -> ModelCard:
    served, project_id = split_model(model_id, runtime.settings.llm_model)
    if not served:
        raise WireError(
            404,
            f"This service serves one model, {runtime.settings.llm_model!r}.",
            code="model_not_found",
            param="model",
        )
    if project_id is not None:
        await _caller_project(runtime, user.subject, project_id)
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
    project = await request_project(request, runtime, user.subject, wanted.project_id)
    agent = await runtime.agents.chat()
    turn = await Turn.start(
        agent,
        TurnRequest(
            message=wanted.message,
            user_id=user.subject,
            history=wanted.history,
            store_transcript=False,  # the client keeps the conversation
            sampling=wanted.sampling,
            # The project the header or the model id names (checked as the caller's above).
            project_id=project.id if project is not None else None,
            project_name=project.name if project is not None else None,
            accepted_until=accepted_until(user, settings),
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
            limits=runtime.limits,  # the stream slot goes with that usage row
        ),
        Gate(runtime.limits, Caller.user(user.subject), runtime.user_limits()),
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
            max_seconds=response_seconds(settings),
            sep="\n",
            headers=STREAM_HEADERS,
        )
        return releasing(streamed, runtime, turn.admission, turn.unplayed)
    answer = AnswerResponse(stream_turn(turn), AnswerCollector(completion))
    return releasing(answer, runtime, turn.admission, turn.unplayed)


def _data(chunk: dict[str, Any]) -> bytes:
    return sse_data(json.dumps(chunk, ensure_ascii=False, separators=(",", ":")))


async def _chunks(
    events: AsyncGenerator[TurnEvent, None], encoder: ChunkEncoder
) -> AsyncGenerator[bytes, None]:
    # A disconnect makes the response close this generator, which closes the turn's stream and
    # so cancels the turn: its staged memory is discarded. After `done` (the last event) the
    # empty chunk ends the body first; closing the turn's stream then waits for the turn's
    # bookkeeping (app/agent/streaming.py).
    async with contextlib.aclosing(events) as stream:
        async for event in stream:
            for chunk in encoder.encode(event):
                yield _data(chunk)
            if isinstance(event, DoneEvent):
                break
        for chunk in encoder.close():
            yield _data(chunk)
        yield sse_data("[DONE]")
        yield b""


class AnswerResponse(Response):
    """A non-streamed answer. The turn runs while this response is being served, watching the
    connection: a client that leaves before the answer cancels the turn, so nothing is
    committed. Status and body are sent once the turn has ended, each send within the send
    timeout: a client that never reads its answer does not hold the stream slot."""

    def __init__(self, events: AsyncGenerator[TurnEvent, None], collector: AnswerCollector) -> None:
        super().__init__(media_type="application/json")
        self.events = events
        self.collector = collector
        self.send_timeout = SEND_TIMEOUT_SECONDS

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
        timed = timed_send(send, self.send_timeout)
        await JSONResponse(body, status_code=status, headers=headers)(scope, receive, timed)


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    await wait_for_disconnect(receive)
    scope.cancel()
