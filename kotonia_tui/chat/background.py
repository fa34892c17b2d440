"""Helpers for the service's background tasks (the fold worker, the embedding worker)."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel a background task and wait until it has stopped (a no-op for None): whatever it
    held (a slot, a transaction) is released before the caller goes on."""
    if task is None:
        return
    current = asyncio.current_task()
    # A caller already cancelled (closing after Ctrl-C) still waits here: only a cancel that
    # arrives while it waits is the caller's own.
    before = current.cancelling() if current is not None else 0
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        # The task's own cancellation ends here; the caller's (Ctrl-C cancels the main task,
        # which may be the one waiting) must go on up, or the program carries on as if the
        # signal was never sent.
        if current is not None and current.cancelling() > before:
            raise
