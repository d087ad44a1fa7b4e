"""Redaction of structured log events: keys that carry content (``message``, ``content``,
``arguments``, ...) are dropped whatever their value, and the request's registered sensitive
values (`app.telemetry.sensitive`) are scrubbed from what is left. One processor serves every
log line; spans have their own (`app.telemetry.span_policy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from structlog.typing import EventDict

from app.telemetry.sensitive import TelemetryScope, current_scope, scrub_text

# Keys whose values are content by nature. Matching is case-insensitive, on the last segment of
# dotted keys too ("gen_ai.prompt" is caught by "prompt"). structlog's own "event" key is the
# constant event name and is deliberately absent.
CONTENT_KEYS: frozenset[str] = frozenset(
    {
        "message",
        "messages",
        "msg",
        "content",
        "contents",
        "text",
        "prompt",
        "prompts",
        "completion",
        "system_prompt",
        "instructions",
        "input",
        "output",
        "arguments",
        "args",
        "kwargs",
        "positional_args",
        "tool_arguments",
        "tool_result",
        "entries",
        "entry",
        "match",
        "snapshot",
        "document",
        "memory_content",
        "user_memory_content",
        "operations",
        "body",
        "json",
        "json_data",
        "data",
        "payload",
        "params",
        "parameters",
        "query",
        "headers",
        "authorization",
        "cookie",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "api_key",
        "secret",
        "password",
        "delta",
        "answer",
        "transcript",
    }
)


def is_content_key(key: str) -> bool:
    lowered = key.lower()
    return lowered in CONTENT_KEYS or lowered.rsplit(".", 1)[-1] in CONTENT_KEYS


_PRIMITIVES = (int, float, bool, type(None))


def scrub_value(value: Any, scope: TelemetryScope | None = None) -> Any:
    """Drop content keys and scrub registered values, recursively; opaque objects become
    their type name, because an arbitrary repr can embed anything."""
    if isinstance(value, str):
        return scrub_text(value, scope)
    if isinstance(value, _PRIMITIVES):
        return value
    if isinstance(value, Mapping):
        return {
            str(key): scrub_value(child, scope)
            for key, child in value.items()
            if not is_content_key(str(key))
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [scrub_value(child, scope) for child in value]
    return f"<{type(value).__name__}>"


# -- structlog processors ---------------------------------------------------------------------

_KEEP_AS_IS = frozenset({"_record", "_from_structlog", "exc_info", "stack_info"})


def redact_event(_logger: Any, _method: str, event_dict: EventDict) -> EventDict:
    """The one log redaction processor: drop content keys, scrub registered values everywhere
    (the event name included: for standard-library records it is the formatted message)."""
    scope = current_scope()
    redacted: dict[str, Any] = {}
    for key, value in event_dict.items():
        if key in _KEEP_AS_IS:
            redacted[key] = value
        elif key == "event":
            redacted[key] = scrub_text(value, scope) if isinstance(value, str) else str(value)
        elif not is_content_key(key):
            redacted[key] = scrub_value(value, scope)
    return redacted
