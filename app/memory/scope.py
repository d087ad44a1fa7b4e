"""The request-bound memory identity: set from the verified token, read by every memory access."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class MemoryRequest:
    user_id: str
    writes_enabled: bool


current_memory_request: ContextVar[MemoryRequest | None] = ContextVar(
    "current_memory_request", default=None
)


class NoMemoryScopeError(RuntimeError):
    """Memory was touched outside an authenticated request scope."""


@contextmanager
def memory_scope(user_id: str, writes_enabled: bool) -> Iterator[MemoryRequest]:
    request = MemoryRequest(user_id=user_id, writes_enabled=writes_enabled)
    token = current_memory_request.set(request)
    try:
        yield request
    finally:
        current_memory_request.reset(token)


def require_scope() -> MemoryRequest:
    request = current_memory_request.get()
    if request is None:
        raise NoMemoryScopeError("no authenticated memory scope is active")
    return request
