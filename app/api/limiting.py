"""Limits at the routes: admit a turn before its stream opens (a refusal is a plain 429 with
Retry-After, since nothing has been sent yet), and free its stream slot when the response has
ended, however it ended, unless the turn's last row already freed it in its own transaction
(`LimitStore.release_with`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.operators.limits import Admission
from app.runtime import Runtime

Unplayed = Callable[[], Awaitable[None]]


class ReleasingResponse(Response):
    """Serves `inner`, then ends what the turn did not (`unplayed`: the row of a turn that never
    ran) and releases the admission: after the last byte, a client that left, a cut stream or a
    failure while sending alike."""

    def __init__(
        self,
        inner: Response,
        runtime: Runtime,
        admission: Admission,
        unplayed: Unplayed | None = None,
    ) -> None:
        # Nothing of its own to send: the inner response sends status, headers and body.
        self.inner = inner
        self.runtime = runtime
        self.admission = admission
        self.unplayed = unplayed
        self.status_code = inner.status_code
        self.background = None
        self.raw_headers = inner.raw_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.background is not None and self.inner.background is None:
            self.inner.background = self.background
        try:
            await self.inner(scope, receive, send)
        finally:
            try:
                if self.unplayed is not None:
                    await self.unplayed()  # its row frees the slot, when it has one
            finally:
                await self.runtime.limits.release(self.admission)


def releasing(
    response: Response, runtime: Runtime, admission: Admission, unplayed: Unplayed | None = None
) -> Response:
    """`response`, releasing the admission's stream slot (if it took one) when it has ended,
    after `unplayed` (if given)."""
    if not admission.holds_slot and unplayed is None:
        return response
    return ReleasingResponse(response, runtime, admission, unplayed)
