"""How the memory routes answer what they could not do: one translation of a failed read or
commit into the documented statuses, instead of a copy in each route."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from app.api.project_scope import NO_PROJECT
from app.errors import AppError, Conflict, NotFound, ServiceUnavailable, Unprocessable
from app.memory.projects import ProjectNotFoundError
from app.memory.repository import CommitCancelledError
from app.memory.rules import MemoryValidationError
from app.memory.service import MemoryBusyError

# A stale undo or match is a conflict with what memory became meanwhile, not a broken rule.
STALE_CODES = frozenset({"stale_match", "stale_undo"})


def memory_unavailable() -> ServiceUnavailable:
    """The 503 of every memory route whose read or write did not complete in time."""
    return ServiceUnavailable("Memory cannot be reached right now.", code="memory_unavailable")


@contextmanager
def commit_failures(
    log: Any, *, rejected: str, failed: str, stale_conflicts: bool = False, **fields: object
) -> Iterator[None]:
    """How every route that commits to memory answers a failed commit, logged as `rejected` (a
    broken rule: 422, or 409 for a stale undo or match with `stale_conflicts`) or `failed` (busy:
    503 `memory_busy`; anything else: 503 `memory_unavailable`) with `fields`, the error's class
    name and code only, on the route's logger `log`. A missing project is 404; an answer the
    block chose passes through."""
    try:
        yield
    except ProjectNotFoundError:
        raise NotFound(NO_PROJECT) from None
    except MemoryValidationError as error:
        log.info(rejected, code=error.code, **fields)
        if stale_conflicts and error.code in STALE_CODES:
            raise Conflict(error.message, code=error.code) from None
        raise Unprocessable(error.message, code=error.code) from None
    except (CommitCancelledError, AppError):
        raise
    except MemoryBusyError:
        log.warning(failed, error="MemoryBusyError", **fields)
        raise ServiceUnavailable(
            "Memory is busy with another change; nothing was changed. Retry shortly.",
            code="memory_busy",
        ) from None
    except Exception as error:
        log.warning(failed, error=type(error).__name__, **fields)
        raise memory_unavailable() from None
