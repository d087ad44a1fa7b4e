"""A turn as a stream of events for the route adapters (SSE, AI SDK, OpenAI chunks): the turn
runs in its own task, and a consumer that goes away cancels it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from app.agent.events import DoneEvent, TurnEvent
from app.agent.turn import Turn
from app.concurrency import CLEANUP_SECONDS, wait_shielded
from app.telemetry import metrics


class _Mailbox:
    """The turn's events for its one consumer: a list and at most one waiting future. (An
    `asyncio.Queue` keeps three deques and its own futures: a few KiB of every idle stream.)"""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: list[TurnEvent | None] = []
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: TurnEvent | None) -> None:
        self._items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def take_all(self) -> list[TurnEvent | None]:
        """Everything queued, in order, once there is something."""
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        items, self._items = self._items, []
        return items


async def stream_turn_batches(turn: Turn) -> AsyncGenerator[tuple[TurnEvent, ...], None]:
    """The turn's events as they happen, in order, each time as every event already queued
    when the consumer wakes (a burst of model chunks becomes one write, never a later one).

    `done` is the last event (the answer's row is stored by then): after its batch comes an
    empty one, where the consumer may end its response before closing this generator, which
    then waits for the turn's bookkeeping (its last log line, metrics and span). A consumer
    that goes away before `done` (the SSE response closes the generator on disconnect)
    cancels the turn and then waits, shielded, for its cleanup: the ledger is discarded and
    the transcript row written."""
    mailbox = _Mailbox()

    async def produce() -> None:
        try:
            await turn.run(mailbox.put)
        finally:
            mailbox.put(None)

    task = asyncio.create_task(produce(), name=f"turn-{turn.turn_id}")
    metrics.stream_opened()
    ended = False
    try:
        while not ended:
            batch: list[TurnEvent] = []
            for event in await mailbox.take_all():
                if event is not None:
                    batch.append(event)
                if event is None or isinstance(event, DoneEvent):  # nothing follows either
                    ended = True
                    break
            if batch:
                yield tuple(batch)
        yield ()
    finally:
        if not ended:
            turn.cancel_event.set()
            task.cancel()
        # This generator is closed by a cancelled consumer, and the turn's own cleanup
        # (rollback, transcript row) must still run to its end; run() reports its own failures.
        try:
            await wait_shielded(task, CLEANUP_SECONDS)
        finally:
            metrics.stream_closed()


async def stream_turn(turn: Turn) -> AsyncGenerator[TurnEvent, None]:
    """The turn's events one by one (see `stream_turn_batches`)."""
    async with contextlib.aclosing(stream_turn_batches(turn)) as batches:
        async for batch in batches:
            for event in batch:
                yield event
