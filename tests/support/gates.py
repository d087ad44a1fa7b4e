"""Gates shared between a test's thread and the live server's event loop: a turn waits at its
gate until the test opens it, and the test can see which turns reached a gate or were cancelled
while waiting there."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field


@dataclass
class Gates:
    """Per-turn gates shared between the test's thread and the server's event loop."""

    _lock: threading.Lock = field(default_factory=threading.Lock)
    _released: set[str] = field(default_factory=set)
    _waiting: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Event]] = field(
        default_factory=dict
    )
    held: set[str] = field(default_factory=set)  # turns that reached their gate
    abandoned: set[str] = field(default_factory=set)  # turns cancelled while held
    passed: set[str] = field(default_factory=set)  # turns that went through an open gate

    def release(self, key: str) -> None:
        with self._lock:
            self._released.add(key)
            waiting = self._waiting.get(key)
        if waiting is not None:
            loop, event = waiting
            loop.call_soon_threadsafe(event.set)

    async def wait(self, key: str) -> None:
        with self._lock:
            self.held.add(key)
            if key in self._released:
                self.passed.add(key)
                return
            event = asyncio.Event()
            self._waiting[key] = (asyncio.get_running_loop(), event)
        try:
            await event.wait()
            with self._lock:
                self.passed.add(key)
        except asyncio.CancelledError:
            with self._lock:
                self.abandoned.add(key)
            raise
        finally:
            with self._lock:
                self._waiting.pop(key, None)
