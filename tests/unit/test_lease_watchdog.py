"""The lease watchdog: a connection held past its lease is broken, one released in time never
is, whenever the lease is taken (the thread just started, waiting on an earlier lease, idle
between leases) and although a new lease does not wake the thread."""

from __future__ import annotations

import threading
import time

import pytest

from app.db import guard
from app.db.guard import Watchdog

LEASE = 0.15  # seconds
SLACK = 2.0  # seconds a break may come late on a loaded machine


class Recorder:
    spoils = True

    def __init__(self) -> None:
        self.fired = threading.Event()

    def fire(self) -> None:
        self.fired.set()

    def close(self) -> None:
        pass


def test_every_lease_held_past_its_deadline_is_broken_and_no_released_one_is() -> None:
    watchdog = Watchdog(LEASE)
    first = Recorder()
    held = watchdog.lease(first, None)  # starts the thread
    released = Recorder()
    watchdog.lease(released, None).release()  # taken while the thread waits on `held`
    assert first.fired.wait(SLACK) and held.broken
    time.sleep(LEASE * 2)  # the thread is now idle, waiting without leases
    late = Recorder()
    watchdog.lease(late, None)  # no wake-up: the idle wait is no longer than a lease
    assert late.fired.wait(SLACK)
    time.sleep(LEASE * 2)
    assert not released.fired.is_set()


def test_the_thread_ends_when_idle_and_a_later_lease_starts_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(guard, "IDLE_EXIT_SECONDS", LEASE)
    watchdog = Watchdog(LEASE)
    watchdog.lease(Recorder(), None).release()
    thread = watchdog._thread
    assert thread is not None
    thread.join(SLACK)
    assert not thread.is_alive() and watchdog._thread is None
    again = Recorder()
    watchdog.lease(again, None)
    assert again.fired.wait(SLACK)


class CountingCondition(threading.Condition):
    def __init__(self) -> None:
        super().__init__()
        self.notified = 0

    def notify(self, n: int = 1) -> None:
        self.notified += 1
        super().notify(n)


def test_no_lease_wakes_a_running_thread() -> None:
    """Leases taken while the thread waits on an earlier one, or idles between leases, leave
    it asleep: each wake-up would be a thread switch per database checkout."""
    watchdog = Watchdog(LEASE)
    condition = watchdog._condition = CountingCondition()
    watchdog.lease(None, None).release()  # starts the thread
    deadline = time.monotonic() + SLACK
    while watchdog._wake_at == float("inf") and time.monotonic() < deadline:
        time.sleep(0.005)
    for _ in range(20):  # while it waits on the first lease's deadline
        watchdog.lease(None, None).release()
    time.sleep(LEASE * 3)  # every lease has passed: the thread idles without leases
    for _ in range(20):
        watchdog.lease(None, None).release()
    assert condition.notified == 0
