"""Helpers for the service's background tasks (the fold worker, the embedding worker)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel a background task and wait until it has stopped (a no-op for None): whatever it
    held (a slot, a transaction) is released before the caller goes on."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
