"""The one way the memory-control routes change memory (undo, accepting a proposal): through
MemoryService's write path, with its errors answered the way every memory write answers them."""

from __future__ import annotations

import re

import structlog

from app.api.memory.failures import commit_failures
from app.concurrency import CancelFlag
from app.errors import NotFound
from app.memory.projects import GENERAL, Scope
from app.memory.provenance import Provenance
from app.memory.service import CommitResult
from app.memory.writes import MemoryNotFoundError
from app.runtime import Runtime

logger = structlog.get_logger(__name__)

# History and proposal ids are uuid4() in canonical text form; nothing else names one, and
# anything else is answered as absent without asking the database (PostgreSQL refuses NUL).
_ISSUED_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


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
    with commit_failures(
        logger,
        rejected="memory.control_rejected",
        failed="memory.control_failed",
        stale_conflicts=True,
        source=provenance.source,
    ):
        try:
            result = await runtime.memory.commit_in_worker(
                user_id,
                [],
                CancelFlag(),
                provenance=provenance,
                proposal_id=proposal_id,
                scope=scope,
            )
        except MemoryNotFoundError:
            raise NotFound(missing) from None
    logger.info(
        "memory.control_committed",
        source=provenance.source,
        changed=len(result.changed),
        retry_count=result.retry_count,
        duration_ms=round(result.duration_ms, 1),
    )
    return result
