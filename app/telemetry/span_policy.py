"""Which span attributes may leave the process: an allow-list of metadata keys, numbers in a few
namespaces, and the content-capture attributes only when the request's flag allows them. Every
string kept is still scrubbed of the request's registered sensitive values."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from opentelemetry.util.types import AttributeValue

from app.telemetry.sensitive import TelemetryScope

# Attributes allowed with any value type (strings are still scrubbed of registered values).
ALLOWED_ATTRIBUTES: frozenset[str] = frozenset(
    {
        # HTTP server spans (old and stable semantic conventions)
        "http.method",
        "http.request.method",
        "http.route",
        "http.status_code",
        "http.response.status_code",
        "http.scheme",
        "url.scheme",
        "http.flavor",
        "network.protocol.version",
        "http.target",
        "http.url",
        "url.full",
        "url.path",
        "http.server_name",
        "http.host",
        "server.address",
        "server.port",
        "net.host.name",
        "net.host.port",
        "asgi.event.type",
        "error.type",
        # GenAI semantic conventions: metadata only (never prompts, completions or tool arguments);
        # numeric ones (token counts, sampling options) pass through NUMERIC_NAMESPACES
        "gen_ai.operation.name",
        "gen_ai.request.model",
        "gen_ai.response.finish_reasons",
        # Memory metadata (the design's memory event, docs/design.md)
        "memory.tool",
        "memory.status",
        "memory.outcome",
        "memory.stage",
        # Turn metadata
        "turn.agent",
        "turn.outcome",
        # Identifiers
        "app.request_id",
        "app.turn_id",
        "app.subject_hash",
        # Exception events: the type, never the message or the stacktrace
        "exception.type",
        "exception.escaped",
    }
)
# Namespaces whose numeric and boolean attributes are metadata (counts, sizes, durations).
NUMERIC_NAMESPACES: tuple[str, ...] = ("memory.", "gen_ai.", "app.", "llm.", "turn.", "http.")

# The only attributes TELEMETRY_CAPTURE_CONTENT may add, and only on our own spans.
CAPTURE_ATTRIBUTES: frozenset[str] = frozenset(
    {
        "app.capture.user_message",
        "app.capture.memory_operations",
        "app.capture.model_output",
    }
)

_URL_KEYS = frozenset({"http.target", "http.url", "url.full", "url.path"})
URL_QUERY = re.compile(r"[?#].*$", re.DOTALL)


def _is_number(value: object) -> bool:
    if isinstance(value, bool | int | float):
        return True
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and all(isinstance(item, bool | int | float) for item in value)
    )


def _clean_value(key: str, value: AttributeValue, scope: TelemetryScope | None) -> AttributeValue:
    if isinstance(value, str):
        if key in _URL_KEYS:
            value = URL_QUERY.sub("", value)
        return scope.scrub(value) if scope is not None else value
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [
            scope.scrub(item) if isinstance(item, str) and scope is not None else item
            for item in value
        ]
    return value


def filter_attributes(
    attributes: Mapping[str, AttributeValue] | None,
    scope: TelemetryScope | None,
    *,
    allow_capture: bool = False,
) -> dict[str, AttributeValue]:
    """Keep allow-listed metadata only; the capture attributes pass only when `allow_capture`."""
    kept: dict[str, AttributeValue] = {}
    for key, value in (attributes or {}).items():
        if key in CAPTURE_ATTRIBUTES:
            if allow_capture:
                kept[key] = value
        elif key in ALLOWED_ATTRIBUTES:
            kept[key] = _clean_value(key, value, scope)
        elif key.startswith(NUMERIC_NAMESPACES) and _is_number(value):
            kept[key] = value
    return kept
