"""Ctrl-C cancels the main task; the helpers it may be waiting in must let that through.

No model and no store: these are the asyncio helpers a turn, the fold worker and semantic recall
wait in, driven so the caller's cancellation lands at the exact moment that Python 3.11's
`asyncio.wait_for` (and a plain suppress around a cancelled task) used to swallow it. A program
that swallows it carries on after Ctrl-C as if the signal was never sent (seen once in the
suite: `kotonia chat --say` ran its reply to the cap and exited 0).
"""

from __future__ import annotations

import asyncio

import pytest

from kotonia_tui.chat.background import cancel_and_wait
from kotonia_tui.chat.fold.wait import SYSTEM_CLOCK


async def test_cancelling_the_caller_of_cancel_and_wait_reaches_the_caller():
    cleaning = asyncio.Event()

    async def background() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            cleaning.set()
            await asyncio.sleep(0.05)  # releases what it held, which takes a moment

    task = asyncio.create_task(background())
    await asyncio.sleep(0)
    stopper = asyncio.create_task(cancel_and_wait(task))
    await cleaning.wait()
    stopper.cancel()  # Ctrl-C while the caller waits for the background task to stop
    with pytest.raises(asyncio.CancelledError):
        await stopper
    assert task.done()  # and the background task did stop first


async def test_cancel_and_wait_still_absorbs_the_background_tasks_own_cancellation():
    task = asyncio.create_task(asyncio.sleep(60))
    await asyncio.sleep(0)
    await cancel_and_wait(task)  # no exception: stopping it was the point
    assert task.cancelled()


async def test_a_wait_cancelled_as_its_event_is_set_is_cancelled():
    event = asyncio.Event()
    waiter = asyncio.create_task(SYSTEM_CLOCK.wait(event, 30))
    await asyncio.sleep(0)
    # In one step: the event is set and the waiter cancelled (a fold lands as Ctrl-C arrives).
    event.set()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter


async def test_a_wait_ends_on_its_event_or_its_timeout():
    event = asyncio.Event()
    assert await SYSTEM_CLOCK.wait(event, 0.01) is False
    event.set()
    assert await SYSTEM_CLOCK.wait(event, 30) is True


async def test_a_caller_already_cancelled_still_waits_for_the_task_and_goes_on():
    """Closing after Ctrl-C: the main task is already cancelled, and its `finally` stops the
    background tasks one by one; each stop must finish, not raise the old cancellation."""
    task = asyncio.create_task(asyncio.sleep(60))
    await asyncio.sleep(0)
    closing = asyncio.current_task()
    assert closing is not None
    closing.cancel()  # the Ctrl-C that began the closing, already delivered
    with pytest.raises(asyncio.CancelledError):
        await asyncio.sleep(1)
    await cancel_and_wait(task)  # no exception: the closing goes on to the next step
    assert task.cancelled()
    closing.uncancel()
