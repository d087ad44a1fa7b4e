"""The person's own erasure: `DELETE /v1/account`, confirmed by typing their subject."""

from __future__ import annotations

import structlog
from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, StrictStr

from app.api.deps import CurrentUser, RuntimeDep
from app.api.errors import BODY_ERRORS, error_responses
from app.erasure.service import ErasureService
from app.errors import ServiceUnavailable, Unprocessable

logger = structlog.get_logger(__name__)

router = APIRouter(prefix="/v1", tags=["account"])


class AccountDeletion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    confirm: StrictStr  # the caller's own subject, exactly


def erasure_unavailable() -> ServiceUnavailable:
    """Part of the erasure may be done; sending the same request again finishes it."""
    return ServiceUnavailable(
        "The erasure did not complete; send the request again to finish it.",
        code="erasure_unavailable",
    )


async def erase(erasure: ErasureService, subject: str) -> None:
    try:
        await erasure.erase_async(subject)
    except Exception as error:
        logger.warning("erasure.failed", error_type=type(error).__name__)
        raise erasure_unavailable() from None


@router.delete(
    "/account",
    status_code=204,
    response_class=Response,
    summary="Erase the caller: memory, history, proposals, settings and conversations",
    responses=error_responses(*BODY_ERRORS, 401, 503),
)
async def delete_account(body: AccountDeletion, user: CurrentUser, runtime: RuntimeDep) -> Response:
    if body.confirm != user.subject:
        raise Unprocessable(
            "To delete the account, send the account's subject as `confirm`.",
            code="confirmation_mismatch",
        )
    await erase(runtime.erasure, user.subject)
    return Response(status_code=204)
