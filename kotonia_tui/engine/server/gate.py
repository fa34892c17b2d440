"""The priority gate: one request at a time goes to the server, a user turn first.

A user turn waits for nothing but another user turn. A background call (a fold, a prewarm) that
holds the gate when a user turn arrives is asked to stop (`preempt`); the engine then raises
`CallPreemptedError` and the fold worker runs it again shortly.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field


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
