"""Waiting on observable outcomes with a deadline: poll, never sleep for a fixed time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

DEADLINE_SECONDS = 30.0
POLL_SECONDS = 0.02


def wait_for(
    predicate: Callable[[], object], what: str, *, seconds: float = DEADLINE_SECONDS
) -> None:
    """Poll `predicate` until it is true, failing with `what` at the deadline."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {seconds:.0f} s")
        time.sleep(POLL_SECONDS)


async def await_for(
    predicate: Callable[[], object], what: str, *, seconds: float = DEADLINE_SECONDS
) -> None:
    """`wait_for` for async tests: the (blocking) predicate runs in a worker thread."""
    deadline = time.monotonic() + seconds
    while not await asyncio.to_thread(predicate):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {seconds:.0f} s")
        await asyncio.sleep(POLL_SECONDS)
