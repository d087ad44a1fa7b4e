"""The sensitive values of one request: everything registered here (the user's message, memory
entries read or staged, tool arguments, bearer tokens) is replaced by `[redacted]` wherever it
shows up as text in telemetry: event fields, formatted third-party log messages, span names and
span attribute values.

The registry lives in a `TelemetryScope` bound to a context variable, so it follows the request
into worker threads (`asyncio.to_thread` copies the context) and never crosses requests.
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import json
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

REDACTED = "[redacted]"

# Shorter strings are not registered: scrubbing "user" or "memory" everywhere would wreck every
# line while protecting nothing; short content is covered by key dropping and logger clamps.
MIN_SENSITIVE_LENGTH = 8

# String leaves of a request body under these keys are identifiers or enums, not content
# (`model` and `role` of a chat-completions body are checked against fixed values before use).
_NOT_CONTENT_LEAF_KEYS = frozenset(
    {"target", "action", "conversation_id", "turn_id", "id", "sub", "model", "role"}
)


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
    # The values longest first, and their lengths negated (ascending, for bisect).
    _ordered: tuple[tuple[str, ...], list[int]] | None = None
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
                self._ordered = None

    @property
    def values(self) -> frozenset[str]:
        return frozenset(self._values)

    def _longest_first(self) -> tuple[tuple[str, ...], list[int]]:
        ordered = self._ordered  # read without the lock: `register` resets it under the lock
        if ordered is not None:
            return ordered
        with self._lock:
            if self._ordered is None:
                values = tuple(sorted(self._values, key=len, reverse=True))
                self._ordered = (values, [-len(value) for value in values])
            return self._ordered

    def pattern(self, text: str) -> re.Pattern[str] | None:
        """The alternation of the registered values that occur in `text`, longest first: it
        replaces in `text` exactly what the alternation of every value would. A request may
        register hundreds of long values (a chat-completions history) and a log line holds few
        of them, so the regex is built from those, not compiled for all on every request."""
        values, lengths = self._longest_first()
        fitting = values[bisect.bisect_left(lengths, -len(text)) :]  # no longer than `text`
        present = [value for value in fitting if value in text]
        return re.compile("|".join(map(re.escape, present))) if present else None

    def scrub(self, text: str) -> str:
        if len(text) < MIN_SENSITIVE_LENGTH:  # no registered value fits in it
            return text
        pattern = self.pattern(text)
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


def register_search(query: str, texts: Iterable[str]) -> None:
    """A conversation search: its query and the texts it found (messages, titles, snippets)."""
    register_sensitive(query, *texts)


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
