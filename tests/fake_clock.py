"""A clock a test moves on itself, for the fold worker and a turn's wait (chat/fold/wait.py
`Clock`): fold delays, backoffs, leases, a fold's stall and the wait's cap, without sleeping.

`advance` moves it on, from any thread (a fake engine's step hook runs on the model's owner
thread). What it reads:

* `monotonic()` moves only by `advance`: how long a fold has not moved, or a turn has waited, is
  exactly what the test made it.
* `now()` is the system's time plus every advance: a due time the app stamps with the system's
  clock (a new job is due at once) stays comparable, and one the test jumps past is due.
* `sleep` and `wait` end when the clock has been moved far enough, or when as many real seconds
  have passed (as the system's would), whichever comes first: a worker asleep until a job falls
  due wakes when the test moves the clock past it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from datetime import datetime, timedelta

from kotonia_tui.chat.fold.wait import Clock
from kotonia_tui.domain import utcnow


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class FakeClock(Clock):
    def __init__(self) -> None:
        self._moved = 0.0
        self._lock = threading.Lock()
        self._sleepers: list[tuple[float, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def monotonic(self) -> float:
        return self._moved

    def now(self) -> datetime:
        return utcnow() + timedelta(seconds=self._moved)

    def advance(self, seconds: float) -> None:
        """Move the clock on; whoever sleeps until then wakes."""
        with self._lock:
            self._moved += seconds
            due = [s for s in self._sleepers if s[0] <= self._moved]
            self._sleepers = [s for s in self._sleepers if s[0] > self._moved]
        for _deadline, loop, future in due:
            loop.call_soon_threadsafe(_wake, future)

    async def sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._until(self._moved + seconds), seconds)

    async def wait(self, event: asyncio.Event, timeout: float) -> bool:
        if event.is_set():
            return True
        moved = asyncio.ensure_future(self._until(self._moved + timeout))
        setting = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait(
                {moved, setting}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for task in (moved, setting):
                task.cancel()
            await asyncio.gather(moved, setting, return_exceptions=True)
        return event.is_set()

    async def _until(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (deadline, loop, future)
        with self._lock:
            if self._moved >= deadline:
                return
            self._sleepers.append(entry)
        try:
            await future
        finally:
            with self._lock:
                if entry in self._sleepers:
                    self._sleepers.remove(entry)
