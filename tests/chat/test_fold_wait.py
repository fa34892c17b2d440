"""A turn waits for the fold that keeps its messages in memory as long as the fold moves
(issue 14, chat/fold/wait.py): real engine (a scripted tiny GGUF), real SQLite, real worker.

The tiny model folds in milliseconds, where a loaded machine took 6-10 minutes a chapter. The
load is made here by holding the engine's owner thread (`Load`): a job at the interactive
priority sleeps there, so the fold gets one step (a batch of its prompt, a token of its answer)
between two holds. The fold moves, slowly; held once for long, it stalls. Only the holding is
test code: engine, worker, store and service are the app's own.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from kotonia_tui.chat.events import FoldWait
from kotonia_tui.chat.service import ChatService
from kotonia_tui.chat.turn import Turn
from kotonia_tui.engine import Priority, Slot
from tests.cards import write_short_card

from .test_folding import CHAPTER, chat_until
from .test_small_windows import events_of, open_chat

# A chapter long enough that writing it takes a few dozen steps of the fold.
LONG_CHAPTER = (
    "Ann visited Wren at the lighthouse in the storm. They talked about the storm lamps, the "
    "brass compass of the Grey Heron, the letter from her brother Tom and the harbour records "
    "they would search at dawn, and Ann promised to stay until spring."
)


class Load:
    """Holds the engine's owner thread for `hold_s` at a time, from a thread of its own, with
    at least one step of the fold in between (`steady`), or once (`steady=False`)."""

    def __init__(self, service: ChatService, hold_s: float, *, steady: bool = True) -> None:
        self.engine = service.engine
        self.hold_s = hold_s
        self.steady = steady
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _hold(self) -> None:
        owner = self.engine._owner  # type: ignore[attr-defined]
        owner.call(lambda: time.sleep(self.hold_s), priority=int(Priority.INTERACTIVE)).result()

    def _run(self) -> None:
        self._hold()
        while self.steady and not self._stop.is_set():
            seen = self.engine.work(Slot.FOLD)
            while self.engine.work(Slot.FOLD) == seen and not self._stop.is_set():
                time.sleep(0.001)  # until the fold took a step
            self._hold()


def load_when_the_turn_waits(service: ChatService, load: Load) -> list[FoldWait]:
    """The load starts as the first turn begins to wait for a fold; the waits are recorded."""
    waits: list[FoldWait] = []

    def seen(event: object) -> None:
        if isinstance(event, FoldWait):
            waits.append(event)
            load.start()

    service.subscribe(seen)
    return waits


async def chat_until_a_turn_waits(service: ChatService, conv_id: int, load: Load) -> list[Turn]:
    """Chat until a turn has waited for a fold (the load on while it waits); the turns sent."""
    try:
        return await chat_until(service, conv_id, lambda t: t.prepared.fold_wait_ms > 0)
    finally:
        load.stop()


async def open_folding_chat(make_service, model: Path, **values) -> tuple[ChatService, int]:
    """A chat whose chapter jobs run only when a turn waits for them."""
    values.setdefault("fold_delay_s", 3600)
    return await open_chat(make_service, model, write_short_card(), **values)


async def test_a_slow_fold_that_keeps_moving_is_waited_for_to_the_end(make_service, scripted_model):
    """With a fixed bound of `fold_wait_s` the turn gave up on a fold that was getting on:
    the messages left the prompt (a forced cut) and the chapter landed turns later."""
    # A batch of the fold's prompt can take a second on a loaded machine: the patience is
    # more than a batch and a hold, the fold's 20 or so steps with a hold each far more.
    stall_s = 3.0
    service, conv_id = await open_folding_chat(
        make_service, scripted_model(CHAPTER), fold_wait_s=stall_s
    )
    load = Load(service, hold_s=0.4)
    waits = load_when_the_turn_waits(service, load)
    turns = await chat_until_a_turn_waits(service, conv_id, load)
    waited = turns[-1]
    # The premise: the fold took longer than the patience (it was slowed, and it moved).
    assert waited.prepared.fold_wait_ms > stall_s * 1000
    assert waited.prepared.plan.forced_cut_through is None
    assert waited.prepared.plan.apply_landed  # this very turn carries the chapter
    stats = waited.stats()
    assert stats is not None and (stats["forced_cut"], stats["fold_applied"]) == (False, True)
    assert waits[0].text.startswith("waiting for fold #") and not waits[0].progress
    moving = [w for w in waits if w.progress]
    assert moving, "the progress was never said"
    assert moving[-1].progress.startswith("read ") and ", wrote " in moving[-1].progress
    assert waits[-1].done and waits[-1].text == "waiting for the memory: done"
    assert service.store.memory_state(conv_id).forced_cuts == 0


async def test_a_fold_that_stops_moving_is_given_up_and_lands_later(make_service, scripted_model):
    service, conv_id = await open_folding_chat(
        make_service, scripted_model(LONG_CHAPTER), fold_wait_s=1.0
    )
    load = Load(service, hold_s=5.0, steady=False)  # the engine is taken for 5 s in one go
    waits = load_when_the_turn_waits(service, load)
    turns = await chat_until_a_turn_waits(service, conv_id, load)
    gave_up = turns[-1]
    assert waits[-1].done
    assert waits[-1].text.startswith("waiting for the memory: the fold made no progress for 1 s")
    assert "going on (it goes on in the background" in waits[-1].text
    # The turn went on without the chapter: the oldest messages left the prompt, counted.
    assert gave_up.prepared.plan.forced_cut_through is not None
    assert (await gave_up.wait()).error is None
    assert service.store.memory_state(conv_id).forced_cuts == 1
    # The fold went on in the background; it lands and a later turn carries it.
    await service.worker.wait_settled(conv_id)
    after = await service.send(conv_id, "And then?")
    assert (await after.wait()).error is None
    assert after.prepared.plan.apply_landed


async def test_the_user_can_go_on_without_the_fold(make_service, scripted_model):
    service, conv_id = await open_folding_chat(
        make_service,
        scripted_model(LONG_CHAPTER),
        fold_wait_s=600,  # only the user ends it
    )
    assert not service.go_on_without_fold(conv_id)  # no turn waits
    load = Load(service, hold_s=0.25)
    events = events_of(service)
    answered: list[bool] = []

    def go_on(event: object) -> None:
        if isinstance(event, FoldWait) and not event.done:
            load.start()
            loop = asyncio.get_running_loop()
            loop.call_later(0.5, lambda: answered.append(service.go_on_without_fold(conv_id)))

    service.subscribe(go_on)
    turns = await chat_until_a_turn_waits(service, conv_id, load)
    assert answered and answered[0]
    waits = [e for e in events if isinstance(e, FoldWait)]
    assert waits[-1].done
    assert waits[-1].text.startswith("waiting for the memory: going on without it, as asked")
    assert turns[-1].prepared.plan.forced_cut_through is not None


async def test_the_wait_has_a_cap_however_the_fold_moves(make_service, scripted_model):
    service, conv_id = await open_folding_chat(
        make_service, scripted_model(LONG_CHAPTER), fold_wait_s=600, fold_wait_max_s=1.0
    )
    load = Load(service, hold_s=0.3)
    waits = load_when_the_turn_waits(service, load)
    turns = await chat_until_a_turn_waits(service, conv_id, load)
    assert waits[-1].done
    assert waits[-1].text.startswith("waiting for the memory: not finished after 1 s")
    assert turns[-1].prepared.plan.forced_cut_through is not None
