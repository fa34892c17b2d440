"""How long a turn waits for the fold that keeps its messages in memory: while the fold moves.

A turn that would cut messages at the ceiling waits for the chapter job that covers them
(chat/prompting.py decides which jobs; chat/service.py says the wait; chat/fold/worker.py runs
it). A fixed time does not fit: on a loaded machine one chapter took 6-10 minutes, so a bound
of two minutes gave up on folds that were getting on, and the messages left the prompt anyway.

So the wait follows the fold's progress, read from the engine (`Engine.work(Slot.FOLD)`: prompt
tokens read and tokens written by fold calls). It goes on while the fold model works, and gives
up only when the fold has not moved for `stall_s` (a stuck server, a worker waiting for a
backend that is down) or when `cap_s` has passed in all. In the app the user can go on without
the fold at any moment (a key); scripts keep the configured bounds.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from kotonia_tui.domain import utcnow

REPORT_EVERY_S = 1.0  # how often a waiting turn says how far the fold has got
# What the user is told when a major fold stops for a turn waiting on chapters. It is not a
# failed attempt: the job goes back to pending with no error (store.release_fold).
GAVE_WAY = "gave way to a chapter a turn waits for"


class Clock:
    """The time the fold worker and a turn's wait go by: when a job falls due (its delay, its
    backoff, a lease), how long a fold has not moved, how long a turn has waited. The system's
    clock here; a test gives one it moves on itself, so time-driven behaviour is tested without
    sleeping (tests/fake_clock.py). How often a waiting loop looks again is not the clock's:
    those polls stay short real sleeps."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return utcnow()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait(self, event: asyncio.Event, timeout: float) -> bool:
        """Until `event` is set (True) or `timeout` seconds have passed (False)."""
        try:
            # Not wait_for: on Python 3.11 it swallows a cancellation that lands as the event
            # is set (the caller would go on after Ctrl-C); a timeout scope never does.
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            return False
        return True


SYSTEM_CLOCK = Clock()


class WaitEnd(StrEnum):
    DONE = "done"  # every job waited for finished an attempt
    STALLED = "stalled"  # the fold made no progress for `stall_s`
    CAPPED = "capped"  # the wait reached `cap_s`
    SKIPPED = "skipped"  # the user went on without it


@dataclass(frozen=True)
class Patience:
    """How long a turn waits: while the fold moves, at most `stall_s` without progress and
    `cap_s` in all."""

    stall_s: float
    cap_s: float

    def said(self, end: WaitEnd) -> str:
        """How the wait ended, as the status line and `chat --say`'s notes say it."""
        if end is WaitEnd.DONE:
            return "done"
        later = "it goes on in the background and lands on a later turn"
        if end is WaitEnd.STALLED:
            return f"the fold made no progress for {duration(self.stall_s)}; going on ({later})"
        if end is WaitEnd.CAPPED:
            return f"not finished after {duration(self.cap_s)}; going on ({later})"
        return f"going on without it, as asked ({later})"


@dataclass(frozen=True)
class WaitProgress:
    """How far the fold has got since the turn began to wait."""

    evaluated: int  # prompt tokens the fold model has read
    generated: int  # tokens it has written
    waited_s: float

    def said(self) -> str:
        """ "read 1,240 tokens, wrote 85 · 2 min 05 s" """
        return (
            f"read {self.evaluated:,} tokens, wrote {self.generated:,} · {duration(self.waited_s)}"
        )


def duration(seconds: float) -> str:
    """ "45 s", "2 min 05 s" """
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    return f"{whole // 60} min {whole % 60:02d} s"
