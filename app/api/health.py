"""`/healthz` (the process is up) and `/readyz` (the database can serve memory right now, within
READINESS_TIMEOUT_SECONDS)."""

from __future__ import annotations

import asyncio
import uuid

import structlog
from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import Engine, text

from app.api.deps import RuntimeDep
from app.concurrency import to_thread
from app.db.admission import DatabaseBusyError
from app.db.deadline import DeadlineExceededError, within
from app.db.migrate import current_revision, head_revision
from app.memory import writes
from app.memory.unit_of_work import unit_of_work

logger = structlog.get_logger(__name__)

router = APIRouter(tags=["operations"])

PROBE_PREFIX = "__readyz_probe__"


class NotReadyError(Exception):
    """A readiness check failed; the message is the reason reported to the caller."""


class _RollBack(Exception):
    """Ends the probe's unit of work so that it rolls back."""


def _probe(engine: Engine) -> None:
    """Insert, read, update and read back a probe row inside a unit of work (the one way in for
    memory writes, its writer lock included), then roll it back.

    The row is never committed, so no concurrent reader can see it and nothing is left behind.
    """
    try:
        with unit_of_work(engine, f"{PROBE_PREFIX}{uuid.uuid4().hex}", "readiness") as unit:
            if not writes.probe(unit):
                raise NotReadyError("readiness probe could not read its writes back")
            raise _RollBack
    except _RollBack:
        pass


def check_readiness(engine: Engine) -> None:
    """Raise NotReadyError naming the first failing check; the reason never holds credentials."""
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as error:
        raise NotReadyError(f"database unreachable ({type(error).__name__})") from error
    try:
        current, head = current_revision(engine), head_revision()
    except Exception as error:
        raise NotReadyError(f"migration state unreadable ({type(error).__name__})") from error
    if current != head:
        raise NotReadyError(
            f"database schema is at {current or 'no revision'}, not the latest migration {head}"
        )
    try:
        _probe(engine)
    except NotReadyError:
        raise
    except Exception as error:
        raise NotReadyError(f"readiness probe failed ({type(error).__name__})") from error


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "Not ready, with the reason"}})
async def readyz(runtime: RuntimeDep) -> JSONResponse:
    """Ready only if every check passes within READINESS_TIMEOUT_SECONDS, the wait for a
    database worker included: a database that hangs is not ready, nor one whose work queue is
    full (a failover holds every worker until its deadlines), and the abandoned probe can never
    commit (it never commits anyway)."""
    seconds = runtime.settings.readiness_timeout_seconds
    admitted = False

    async def checks() -> None:
        nonlocal admitted
        admitted = True  # `within` calls this once a database worker is ours
        await to_thread(check_readiness, runtime.engine)

    try:
        async with asyncio.timeout(seconds):
            await within(seconds, checks, what="readiness check")
    except NotReadyError as error:
        reason = str(error)
    except (DeadlineExceededError, TimeoutError, DatabaseBusyError):
        if admitted:
            reason = f"database did not answer the readiness checks within {seconds:g} s"
        else:
            reason = f"no database worker was free for the readiness checks within {seconds:g} s"
    else:
        return JSONResponse({"status": "ready"})
    logger.warning("readiness.failed", reason=reason)
    return JSONResponse({"status": "not_ready", "reason": reason}, status_code=503)
