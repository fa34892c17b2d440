"""A running server call: an `EngineCall` whose cancel closes the HTTP stream."""

from __future__ import annotations

import asyncio
from typing import Any

from kotonia_tui.engine.calls import EngineCall


class ServerCall(EngineCall):
    """Stopped by the user ("cancel"), by a user turn that needs the server ("preempt"), or by
    the engine closing ("close"): the first reason is kept."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.stop_event = asyncio.Event()
        self.stop_reason: str | None = None  # "cancel", "preempt" or "close"
        self.task: asyncio.Task[None] | None = None

    def cancel(self) -> None:
        """Close the stream now; the result's finish_reason is then `cancelled`."""
        super().cancel()
        self.request_stop("cancel")

    def request_stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self.stop_event.set()

    async def wait_unless_stopped(self, future: asyncio.Future[Any]) -> None:
        """Wait until `future` is done or the call is asked to stop, whichever comes first."""
        stopped = asyncio.ensure_future(self.stop_event.wait())
        try:
            await asyncio.wait({future, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
