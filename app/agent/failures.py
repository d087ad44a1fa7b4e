"""How a turn's failures end it: each kind becomes the one `error` event the client sees, with a
stable code and a message that says nothing was saved."""

from __future__ import annotations

import structlog

from app.agent.events import ErrorEvent
from app.agent.llm import ModelFailure

log = structlog.get_logger(__name__)

NOTHING_SAVED = "Nothing was saved to memory."


class TurnFailure(Exception):
    """A failure the turn itself decided on, with its own code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def failure_event(error: Exception, *, turn_id: str) -> ErrorEvent:
    """The `error` event for a failed turn. Unknown failures are logged (type and frames, never
    messages) and reported as `internal_error` without detail."""
    if isinstance(error, TimeoutError):
        return ErrorEvent("timeout", f"The turn took too long. {NOTHING_SAVED}")
    if isinstance(error, ModelFailure | TurnFailure):
        return ErrorEvent(error.code, f"{error.message} {NOTHING_SAVED}")
    log.error("turn.failed", turn_id=turn_id, error_type=type(error).__name__, exc_info=error)
    return ErrorEvent("internal_error", f"The turn failed. {NOTHING_SAVED}")
