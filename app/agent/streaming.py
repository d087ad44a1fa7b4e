"""A turn as a stream of events for the route adapters (SSE, AI SDK, OpenAI chunks): the turn
runs in its own task, and a consumer that goes away cancels it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from app.agent.events import TurnEvent
from app.agent.turn import Turn
from app.concurrency import CLEANUP_SECONDS, wait_shielded


async def stream_turn_batches(turn: Turn) -> AsyncGenerator[tuple[TurnEvent, ...], None]:
    """The turn's events as they happen, in order, each time as every event already queued
    when the consumer wakes (a burst of model chunks becomes one write, never a later one). A
    consumer that goes away (sse-starlette cancels the generator on disconnect) cancels the
    turn and then waits, shielded, for its cleanup: the ledger is discarded and the transcript
    row written."""
    queue: asyncio.Queue[TurnEvent | None] = asyncio.Queue()

    async def produce() -> None:
        try:
            await turn.run(queue.put_nowait)
        finally:
            queue.put_nowait(None)

    task = asyncio.create_task(produce(), name=f"turn-{turn.turn_id}")
    try:
        ended = False
        while not ended:
            batch: list[TurnEvent] = []
            event = await queue.get()
            while True:
                if event is None:
                    ended = True
                    break
                batch.append(event)
                if queue.empty():
                    break
                event = queue.get_nowait()
            if batch:
                yield tuple(batch)
    finally:
        if not task.done():
            turn.cancel_event.set()
            task.cancel()
        # This generator is closed by a cancelled consumer, and the turn's own cleanup
        # (rollback, transcript row) must still run to its end; run() reports its own failures.
        await wait_shielded(task, CLEANUP_SECONDS)


async def stream_turn(turn: Turn) -> AsyncGenerator[TurnEvent, None]:
    """The turn's events one by one (see `stream_turn_batches`)."""
    async with contextlib.aclosing(stream_turn_batches(turn)) as batches:
        async for batch in batches:
            for event in batch:
                yield event
