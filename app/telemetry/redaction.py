"""Redaction shared by logs and spans: content-bearing keys, per-request sensitive values, hashes.

Two layers that do not depend on call sites being careful:

1. Keys that carry content (``message``, ``content``, ``arguments``, ...) are dropped from every
   structured event, whatever their value.
2. Values registered during a request (the user's message, memory entries read or staged, tool
   arguments, bearer tokens) are replaced by ``[redacted]`` wherever they show up as text: event
   fields, formatted third-party log messages, span names and span attribute values.

The registry lives in a `TelemetryScope` bound to a context variable, so it follows the request
into worker threads (`asyncio.to_thread` copies the context) and never crosses requests.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
import json
import re
import secrets
import sys
import threading
import traceback
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from structlog.typing import EventDict

REDACTED = "[redacted]"

# Shorter strings are not registered: scrubbing "user" or "memory" everywhere would wreck every
# line while protecting nothing; short content is covered by key dropping and logger clamps.
MIN_SENSITIVE_LENGTH = 8

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

# String leaves of a request body under these keys are identifiers or enums, not content
# (`model` and `role` of a chat-completions body are checked against fixed values before use).
_NOT_CONTENT_LEAF_KEYS = frozenset(
    {"target", "action", "conversation_id", "turn_id", "id", "sub", "model", "role"}
)


def is_content_key(key: str) -> bool:
    lowered = key.lower()
    return lowered in CONTENT_KEYS or lowered.rsplit(".", 1)[-1] in CONTENT_KEYS


def _variants(value: str) -> Iterator[str]:
    """The forms a string takes in third-party output: raw, JSON-escaped, repr-escaped, lines."""
    yield value
    yield json.dumps(value)[1:-1]
    yield json.dumps(value, ensure_ascii=False)[1:-1]
    yield repr(value)[1:-1]
    for line in value.splitlines():
        yield line.strip()


@dataclass
class TelemetryScope:
    """The telemetry state of one request: its sensitive values and whether capture is on."""

    capture_content: bool = False
    request_id: str | None = None
    _values: set[str] = field(default_factory=set)
    _pattern: re.Pattern[str] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def register(self, values: Iterable[str]) -> None:
        added = False
        with self._lock:
            for value in values:
                if not isinstance(value, str) or len(value.strip()) < MIN_SENSITIVE_LENGTH:
                    continue
                for variant in _variants(value):
                    if len(variant) >= MIN_SENSITIVE_LENGTH and variant not in self._values:
                        self._values.add(variant)
                        added = True
            if added:
                self._pattern = None

    @property
    def values(self) -> frozenset[str]:
        return frozenset(self._values)

    def pattern(self) -> re.Pattern[str] | None:
        with self._lock:
            if self._pattern is None and self._values:
                ordered = sorted(self._values, key=len, reverse=True)
                self._pattern = re.compile("|".join(re.escape(value) for value in ordered))
            return self._pattern

    def scrub(self, text: str) -> str:
        pattern = self.pattern()
        return pattern.sub(REDACTED, text) if pattern is not None else text


_scope: contextvars.ContextVar[TelemetryScope | None] = contextvars.ContextVar(
    "telemetry_scope", default=None
)


def current_scope() -> TelemetryScope | None:
    return _scope.get()


@contextmanager
def telemetry_scope(scope: TelemetryScope | None = None) -> Iterator[TelemetryScope]:
    """Bind a fresh scope (or `scope`) for the duration of a request, a turn or a test."""
    bound = scope if scope is not None else TelemetryScope()
    token = _scope.set(bound)
    try:
        yield bound
    finally:
        _scope.reset(token)


def register_sensitive(*values: str | None) -> None:
    """Mark strings as content of the current request: they are scrubbed from all telemetry.

    Outside any scope (a CLI command, a bare test) one is bound to the current context, so that
    the rest of that context is still covered.
    """
    scope = _scope.get()
    if scope is None:
        scope = TelemetryScope()
        _scope.set(scope)
    scope.register(value for value in values if value)


def string_leaves(value: Any, *, key: str | None = None) -> Iterator[str]:
    """Every string inside a decoded JSON value, except identifiers and enum fields."""
    if isinstance(value, str):
        if key is None or key.lower() not in _NOT_CONTENT_LEAF_KEYS:
            yield value
    elif isinstance(value, Mapping):
        for child_key, child in value.items():
            yield from string_leaves(child, key=str(child_key))
    elif isinstance(value, list | tuple):
        for child in value:
            yield from string_leaves(child, key=key)


def register_json_strings(value: Any) -> None:
    """Register every content string of a decoded JSON document (request bodies, tool arguments)."""
    register_sensitive(*string_leaves(value))


def register_tool_arguments(raw_arguments: str | None) -> None:
    """A model's tool-call arguments: the raw JSON text and every content string inside it."""
    register_sensitive(raw_arguments)
    # Not JSON, or nested past the parser's recursion limit: the raw text is all there is.
    with contextlib.suppress(ValueError, RecursionError):
        register_json_strings(json.loads(raw_arguments or "null"))


def register_memory(snapshot: Any) -> None:
    """Every entry of a memory snapshot (anything with `.user` and `.memory` entry tuples)."""
    register_sensitive(*getattr(snapshot, "user", ()), *getattr(snapshot, "memory", ()))


def register_operations(batches: Iterable[Iterable[Any]]) -> None:
    """The `match` and `content` strings of staged memory operations."""
    register_sensitive(
        *(
            value
            for batch in batches
            for operation in batch
            for value in (getattr(operation, "match", None), getattr(operation, "content", None))
            if isinstance(value, str)
        )
    )


def scrub_text(text: str, scope: TelemetryScope | None = None) -> str:
    scope = scope if scope is not None else _scope.get()
    return scope.scrub(text) if scope is not None else text


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
    scope = _scope.get()
    redacted: dict[str, Any] = {}
    for key, value in event_dict.items():
        if key in _KEEP_AS_IS:
            redacted[key] = value
        elif key == "event":
            redacted[key] = scrub_text(value, scope) if isinstance(value, str) else str(value)
        elif not is_content_key(key):
            redacted[key] = scrub_value(value, scope)
    return redacted


def _exception_lines(exc: BaseException, seen: set[int]) -> list[str]:
    seen.add(id(exc))
    lines: list[str] = []
    cause = exc.__cause__
    context = None if exc.__suppress_context__ else exc.__context__
    if cause is not None and id(cause) not in seen:
        lines += _exception_lines(cause, seen)
        lines.append("\nThe above exception was the direct cause of the following exception:\n\n")
    elif context is not None and id(context) not in seen:
        lines += _exception_lines(context, seen)
        lines.append("\nDuring handling of the above exception, another exception occurred:\n\n")
    if exc.__traceback__ is not None:
        lines.append("Traceback (most recent call last):\n")
        lines += traceback.StackSummary.extract(
            traceback.walk_tb(exc.__traceback__), capture_locals=False
        ).format()
    # The message is withheld: exception texts embed inputs (validation errors quote values,
    # SQLAlchemy errors list bound parameters). Type and location are what an operator needs.
    lines.append(f"{type(exc).__module__}.{type(exc).__qualname__}: [message withheld]\n")
    if isinstance(exc, BaseExceptionGroup):
        for index, inner in enumerate(exc.exceptions, 1):
            if id(inner) not in seen:
                lines.append(f"+-- sub-exception {index} --\n")
                lines += _exception_lines(inner, seen)
    return lines


ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def format_exception_safely(exc_info: ExcInfo | BaseException) -> str:
    """A traceback with frames and exception types only: no exception messages."""
    exc = exc_info if isinstance(exc_info, BaseException) else exc_info[1]
    return "".join(_exception_lines(exc, set())).rstrip("\n")


def _resolve_exc_info(value: Any) -> BaseException | None:
    if isinstance(value, BaseException):
        return value
    if isinstance(value, tuple) and len(value) == 3 and isinstance(value[1], BaseException):
        return value[1]
    if value is True:
        return sys.exc_info()[1]
    return None


def safe_exc_info(_logger: Any, _method: str, event_dict: EventDict) -> EventDict:
    """Replace `exc_info` with a message-free traceback under "exception"."""
    raw = event_dict.pop("exc_info", None)
    exc = _resolve_exc_info(raw)
    if exc is not None:
        event_dict["exception"] = format_exception_safely(exc)
    event_dict.pop("exception_message", None)
    return event_dict


# -- subject hashing --------------------------------------------------------------------------

_hash_key: bytes = secrets.token_bytes(32)


def set_subject_hash_key(key: bytes | str | None) -> None:
    """Without a configured key the hash is stable only within this process."""
    global _hash_key
    if key:
        _hash_key = key.encode() if isinstance(key, str) else key


def subject_hash(subject: str) -> str:
    """A stable pseudonym: HMAC-SHA256 of the subject, truncated. Never the subject itself."""
    digest = hmac.new(_hash_key, b"subject:" + subject.encode(), hashlib.sha256).hexdigest()
    return digest[:16]
