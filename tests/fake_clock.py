"""A clock a test moves on itself, for the fold worker and a turn's wait (chat/fold/wait.py
`Clock`): fold delays, backoffs, leases, a fold's stall and the wait's cap, without sleeping.

It starts at the system's time and moves only by `advance`, which any thread may call (a fake
engine's step hook runs on the model's owner thread). `sleep` and `wait` end when the clock
has been moved far enough (or, for `wait`, when its event is set): a worker asleep until a
job falls due wakes when the test moves the clock past it.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta

from kotonia_tui.chat.fold.wait import Clock
from kotonia_tui.domain import utcnow


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class FakeClock(Clock):
    def __init__(self, start: datetime | None = None) -> None:
        self._start = start or utcnow()
        self._elapsed = 0.0
        self._lock = threading.Lock()
        self._sleepers: list[tuple[float, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def monotonic(self) -> float:
        return self._elapsed

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self._elapsed)

    def advance(self, seconds: float) -> None:
        """Move the clock on; whoever sleeps until then wakes."""
        with self._lock:
            self._elapsed += seconds
            due = [s for s in self._sleepers if s[0] <= self._elapsed]
            self._sleepers = [s for s in self._sleepers if s[0] > self._elapsed]
        for _deadline, loop, future in due:
            loop.call_soon_threadsafe(_wake, future)

    async def sleep(self, seconds: float) -> None:
        await self._until(self._elapsed + seconds)

    async def wait(self, event: asyncio.Event, timeout: float) -> bool:
        if event.is_set():
            return True
        timer = asyncio.ensure_future(self._until(self._elapsed + timeout))
        setting = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait({timer, setting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (timer, setting):
                task.cancel()
            await asyncio.gather(timer, setting, return_exceptions=True)
        return event.is_set()

    async def _until(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (deadline, loop, future)
        with self._lock:
            if self._elapsed >= deadline:
                return
            self._sleepers.append(entry)
        try:
            await future
        finally:
            with self._lock:
                if entry in self._sleepers:
                    self._sleepers.remove(entry)
