"""The bounds every long-lived response shares: it ends when the caller's token stops being
accepted, within STREAM_MAX_SECONDS whatever the client reads, and within the send timeout of a
client that stops reading. Turns apply them through their deadline and `EventStreamResponse`;
a download (the export) through `BoundedDownload`."""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, Mapping

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Message, Send

from app.api.streams.sse import SEND_TIMEOUT_SECONDS, StreamTooLongError, send_within
from app.identity.tokens import Identity
from app.settings import Settings


def accepted_until(identity: Identity, settings: Settings) -> float | None:
    """When the identity's token stops being accepted (its `exp` and the leeway every check
    allows), in epoch seconds; None for a token without `exp`."""
    if identity.expires_at is None:
        return None
    return identity.expires_at + settings.auth_leeway_seconds


def response_seconds(settings: Settings) -> float:
    """The hard bound of a turn's response: the turn itself ends by STREAM_MAX_SECONDS with its
    error event; a client too slow to take that last event gets one send timeout more."""
    return settings.stream_max_seconds + SEND_TIMEOUT_SECONDS


def seconds_left(identity: Identity, settings: Settings) -> float:
    """How long a response of this caller may still last: STREAM_MAX_SECONDS, or less when
    the token stops being accepted first."""
    longest = settings.stream_max_seconds
    until = accepted_until(identity, settings)
    return longest if until is None else max(0.0, min(longest, until - time.time()))


def timed_send(send: Send, seconds: float) -> Send:
    """`send`, each call of which raises `SendTimeoutError` past `seconds`: a client that stops
    reading holds the response (and its stream slot) no longer than that."""

    async def timed(message: Message) -> None:
        await send_within(send, message, seconds)

    return timed


class BoundedDownload(StreamingResponse):
    """A streamed download that ends short (the connection closed, the body never looking
    whole) after `seconds`, or when one send waits longer than the send timeout."""

    def __init__(
        self,
        content: AsyncIterable[bytes],
        *,
        seconds: float,
        media_type: str,
        headers: Mapping[str, str],
        send_timeout: float = SEND_TIMEOUT_SECONDS,
    ) -> None:
        super().__init__(content, media_type=media_type, headers=headers)
        self.seconds = seconds
        self.send_timeout = send_timeout

    async def stream_response(self, send: Send) -> None:
        try:
            with anyio.move_on_after(self.seconds) as whole:
                await super().stream_response(timed_send(send, self.send_timeout))
        finally:
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                with anyio.CancelScope(shield=True):
                    await close()
        if whole.cancelled_caught:
            raise StreamTooLongError
