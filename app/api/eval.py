"""`POST /v1/eval/chat`: the memory-free agent for evaluators, behind `X-Eval-Key`."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request
from starlette.responses import Response

from app.agent.opening import Gate
from app.agent.request import TurnRequest, TurnServices
from app.agent.turn import Turn
from app.api.chat import EVENT_STREAM, ChatPayload, check_message, read_request, respond
from app.api.deps import RuntimeDep, SettingsDep
from app.api.errors import BODY_ERRORS, error_responses
from app.api.limiting import releasing
from app.errors import AppError, NotFound, Unprocessable

router = APIRouter(tags=["evaluation"])


class InvalidEvalKey(AppError):
    status_code = 401
    code = "invalid_eval_key"


async def require_eval_key(
    settings: SettingsDep,
    x_eval_key: Annotated[str | None, Header(alias="X-Eval-Key")] = None,
) -> None:
    """404 while EVAL_API_KEY is unset (the route does not exist); 401 on a missing/wrong key."""
    expected = settings.eval_api_key
    if expected is None or not expected.get_secret_value():
        raise NotFound("Not Found")
    supplied = (x_eval_key or "").encode()
    if not hmac.compare_digest(supplied, expected.get_secret_value().encode()):
        raise InvalidEvalKey("X-Eval-Key is missing or wrong.")


@router.post(
    "/v1/eval/chat",
    summary="One memory-free turn for evaluators, streamed (text/event-stream)",
    dependencies=[Depends(require_eval_key)],
    responses={**EVENT_STREAM, **error_responses(*BODY_ERRORS, 401, 404, 429)},
)
async def eval_chat(request: Request, runtime: RuntimeDep, payload: ChatPayload) -> Response:
    wanted = read_request(request, payload)  # `replaces` needs a conversation_id: refused too
    if wanted.conversation_id is not None:
        raise Unprocessable("The evaluation route keeps no conversations: omit conversation_id.")
    check_message(wanted.message, runtime.settings)
    agent = await runtime.agents.eval()
    turn = await Turn.start(
        agent,
        TurnRequest(message=wanted.message, user_id=None, store_transcript=False),
        # No memory service, no flags, no transcript: nothing here can read or write them.
        TurnServices(settings=runtime.settings),
        # The evaluation route's own limits, counted for its key (there is no user here).
        Gate(runtime.limits, runtime.eval_caller(), runtime.eval_limits()),
    )
    return releasing(respond(turn, wanted.ai_sdk), runtime, turn.admission, turn.unplayed)
