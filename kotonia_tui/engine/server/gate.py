"""Who may use the server when.

The priority gate: one generation at a time goes to the server, a user turn first. A user turn
waits for nothing but another user turn. A background call (a fold, a prewarm) that holds the
gate when a user turn arrives is asked to stop (`preempt`); the engine then raises
`CallPreemptedError` and the fold worker runs it again shortly.

The reply fence: token counts do not go through the gate (they are many, short, and answered
beside a generation), except on a server that ends the stream it is sending whenever another
request arrives (llama-cpp-python's). There a count is refused while a user's reply streams,
and a user's reply waits until the counts already sent are answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

from kotonia_tui.engine.errors import BackendUnavailableError, EngineClosedError

FENCE_POLL_S = 0.002  # how often a waiting reply looks again (a count takes a millisecond or so)


@dataclass(order=True)
class Ticket:
    priority: int
    seq: int
    future: asyncio.Future[None] = field(compare=False)
    preempt: Callable[[], None] = field(compare=False)


class PriorityGate:
    """One holder at a time; the most urgent waiter goes next (lower value first, then FIFO).

    A waiter more urgent than the holder asks the holder to stop (`preempt`): a user turn never
    waits behind a background fold.
    """

    def __init__(self) -> None:
        self._holder: Ticket | None = None
        self._waiting: list[Ticket] = []
        self._seq = itertools.count()

    @property
    def busy(self) -> bool:
        return self._holder is not None or any(not t.future.done() for t in self._waiting)

    async def acquire(self, priority: int, preempt: Callable[[], None]) -> Ticket:
        ticket = Ticket(
            priority, next(self._seq), asyncio.get_running_loop().create_future(), preempt
        )
        if self._holder is None and not self._waiting:
            self._holder = ticket
            return ticket
        heapq.heappush(self._waiting, ticket)
        if self._holder is not None and priority < self._holder.priority:
            self._holder.preempt()
        try:
            await ticket.future
        except asyncio.CancelledError:
            # Granted in the same instant as cancelled: hand the gate on, do not strand it.
            if ticket.future.done() and not ticket.future.cancelled():
                self.release(ticket)
            raise
        return ticket

    def release(self, ticket: Ticket) -> None:
        if self._holder is not ticket:
            return
        self._holder = None
        while self._waiting:
            following = heapq.heappop(self._waiting)
            if following.future.done():  # its waiter went away
                continue
            self._holder = following
            following.future.set_result(None)
            return


class ReplyFence:
    """Keeps token counts and user replies apart where the server cannot have both at once.

    Counts come from the loop and from worker threads; a lock keeps the two tallies exact.
    It lets everything through until `keep_apart` is called (when the server is known).
    """

    def __init__(self) -> None:
        self._exclusive = False
        self._busy_message = ""
        self._lock = threading.Lock()
        self._counts = 0  # count requests in flight
        self._replies = 0  # user replies streaming (or about to)
        self._closed = False

    def keep_apart(self, busy_message: str) -> None:
        """From now on, counts and user replies never overlap; a refused count says this."""
        self._exclusive = True
        self._busy_message = busy_message

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        """Around one count request; raises instead when it must not be sent now."""
        with self._lock:
            if self._closed:
                raise EngineClosedError("the engine is closed")
            if self._exclusive and self._replies:
                raise BackendUnavailableError(self._busy_message)
            self._counts += 1
        try:
            yield
        finally:
            with self._lock:
                self._counts -= 1

    @contextlib.asynccontextmanager
    async def replying(self) -> AsyncIterator[None]:
        """Around a user's reply: from here no count is sent until it ends."""
        with self._lock:
            self._replies += 1
        try:
            while self._exclusive and self._counts:
                await asyncio.sleep(FENCE_POLL_S)
            yield
        finally:
            with self._lock:
                self._replies -= 1

    def close(self) -> None:
        with self._lock:
            self._closed = True
