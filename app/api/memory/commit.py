"""The one way the memory-control routes change memory (undo, accepting a proposal): through
MemoryService's write path, with its errors answered the way every memory write answers them."""

from __future__ import annotations

import re

import structlog

from app.api.memory.entries import memory_unavailable
from app.api.project_scope import NO_PROJECT
from app.concurrency import CancelFlag
from app.errors import Conflict, NotFound, ServiceUnavailable, Unprocessable
from app.memory.projects import GENERAL, ProjectNotFoundError, Scope
from app.memory.provenance import Provenance
from app.memory.repository import CommitCancelledError
from app.memory.rules import MemoryValidationError
from app.memory.service import CommitResult, MemoryBusyError
from app.memory.writes import MemoryNotFoundError
from app.runtime import Runtime

logger = structlog.get_logger(__name__)

# History and proposal ids are uuid4() in canonical text form; nothing else names one, and
# anything else is answered as absent without asking the database (PostgreSQL refuses NUL).
_ISSUED_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
STALE_CODES = frozenset({"stale_match", "stale_undo"})


def is_issued_id(value: str) -> bool:
    return _ISSUED_ID.fullmatch(value) is not None


async def commit_change(
    runtime: Runtime,
    user_id: str,
    *,
    provenance: Provenance,
    proposal_id: str | None = None,
    missing: str,
    scope: Scope = GENERAL,
) -> CommitResult:
    """Apply an undo or an accepted proposal made in `scope`'s project (or outside projects);
    `missing` is the 404's message."""
    try:
        result = await runtime.memory.commit_in_worker(
            user_id,
            [],
            CancelFlag(),
            provenance=provenance,
            proposal_id=proposal_id,
            scope=scope,
        )
    except ProjectNotFoundError:
        raise NotFound(NO_PROJECT) from None
    except MemoryNotFoundError:
        raise NotFound(missing) from None
    except MemoryValidationError as error:
        logger.info("memory.control_rejected", source=provenance.source, code=error.code)
        if error.code in STALE_CODES:
            raise Conflict(error.message, code=error.code) from None
        raise Unprocessable(error.message, code=error.code) from None
    except CommitCancelledError:
        raise
    except MemoryBusyError:
        logger.warning("memory.control_failed", source=provenance.source, error="MemoryBusyError")
        raise ServiceUnavailable(
            "Memory is busy with another change; nothing was changed. Retry shortly.",
            code="memory_busy",
        ) from None
    except Exception as error:
        logger.warning(
            "memory.control_failed", source=provenance.source, error=type(error).__name__
        )
        raise memory_unavailable() from None
    logger.info(
        "memory.control_committed",
        source=provenance.source,
        changed=len(result.changed),
        retry_count=result.retry_count,
        duration_ms=round(result.duration_ms, 1),
    )
    return result
