"""A turn waits for the fold that keeps its messages in memory as long as the fold moves
(issue 14, chat/fold/wait.py): the real worker, store and service, on the fake engine
(tests/fake_engine.py) and a clock the test moves (tests/fake_clock.py).

On a loaded machine one chapter took 6-10 minutes. Here the fold is made slow by the clock
(`Pace`): each of its steps (a batch of its prompt, a token of its answer) costs clock time, and
the waiting turn looks at the fold before and after that time passes, so it sees every step and
every pause; held once for long, the fold stalls. Nothing sleeps: the wait's stall and cap are
read on the clock, which moves only when the fold's steps say so.

Fake engine: these tests are about how long a turn waits for a fold's progress (`work()`), which
the fake reports as the real engine does; they do not depend on the model.
"""

from __future__ import annotations

from collections.abc import Sequence

from kotonia_tui.chat.events import FoldWait
from kotonia_tui.chat.service import ChatService
from kotonia_tui.chat.turn import Turn
from kotonia_tui.engine import Slot
from tests.cards import write_short_card
from tests.fake_clock import FakeClock
from tests.fake_engine import FakeEngine, Step, scripted

from .test_folding import CHAPTER, chat_until, fake_settings_for
from .test_small_windows import events_of

# A chapter long enough that writing it takes a few dozen steps of the fold.
LONG_CHAPTER = (
    "Ann visited Wren at the lighthouse in the storm. They talked about the storm lamps, the "
    "brass compass of the Grey Heron, the letter from her brother Tom and the harbour records "
    "they would search at dawn, and Ann promised to stay until spring."
)
LOOK_POLL_S = 0.05  # real seconds between checks that the pace was stopped


class Pace:
    """Makes the fold slow by the clock: at each of its first `steps` steps, the turn that waits
    looks at the fold (and sees the step's progress), the clock moves on by `step_s` with no
    progress, and the turn looks again before the fold takes its next step. It runs on the fake
    engine's owner thread (its step hook), so the fold cannot go on unseen; it stops when the
    turn's wait ends (the fold then goes on at its own speed)."""

    def __init__(self, service: ChatService, clock: FakeClock, step_s: float, steps: int):
        assert isinstance(service.engine, FakeEngine)
        self.engine = service.engine
        self.clock = clock
        self.step_s = step_s
        self.steps = steps
        self.taken = 0
        self.stopped = False
        self.engine.on_step = self._step
        service.subscribe(self._heard)

    def _heard(self, event: object) -> None:
        if isinstance(event, FoldWait) and event.done:
            self.stopped = True

    def _step(self, step: Step) -> None:
        if step.request.slot is not Slot.FOLD or self.stopped or self.taken >= self.steps:
            return
        self.taken += 1
        self._looked()
        self.clock.advance(self.step_s)
        self._looked()

    def _looked(self) -> None:
        """Until the waiting turn has looked at the fold once more (or the pace stopped)."""
        looks = self.engine.looks
        while not self.stopped and not self.engine.looked_since(looks, LOOK_POLL_S):
            pass


async def chat_until_a_turn_waits(service: ChatService, conv_id: int) -> list[Turn]:
    """Chat until a turn has waited for a fold; the turns sent."""
    return await chat_until(service, conv_id, lambda t: t.prepared.fold_wait_ms > 0)


async def open_folding_chat(
    make_fake_service, script: str, **values
) -> tuple[ChatService, int, FakeClock]:
    """A chat whose chapter jobs run only when a turn waits for them, on a clock of its own.
    The turn waits for the chronicler (quote first is off: tests/chat/test_quote_first.py has
    the turns that never wait)."""
    values.setdefault("fold_delay_s", 3600)
    values.setdefault("fold_quote_first", False)
    key = write_short_card()
    clock = FakeClock()
    service = await make_fake_service(fake_settings_for(**values), scripted(script), clock=clock)
    conv = service.new_conversation(service.library.get(key))
    return service, conv.id, clock


def waits_in(events: Sequence[object]) -> list[FoldWait]:
    return [e for e in events if isinstance(e, FoldWait)]


async def test_a_slow_fold_that_keeps_moving_is_waited_for_to_the_end(make_fake_service):
    """With a fixed bound of `fold_wait_s` the turn gave up on a fold that was getting on:
    the messages left the prompt (a forced cut) and the chapter landed turns later."""
    stall_s = 3.0
    service, conv_id, clock = await open_folding_chat(
        make_fake_service, CHAPTER, fold_wait_s=stall_s
    )
    # Each step a second, well under the patience; five of them, well over it.
    Pace(service, clock, step_s=1.0, steps=5)
    events = events_of(service)
    turns = await chat_until_a_turn_waits(service, conv_id)
    waits = waits_in(events)
    waited = turns[-1]
    # The premise: the fold took longer than the patience (it was slowed, and it moved).
    assert waited.prepared.fold_wait_ms > stall_s * 1000
    assert waited.prepared.plan.forced_cut_through is None
    assert waited.prepared.plan.apply_landed  # this very turn carries the chapter
    stats = waited.stats()
    assert stats is not None and (stats["forced_cut"], stats["fold_applied"]) == (False, True)
    # The job by its kind and range, as the inspector names it (not "fold #<job id>").
    assert waits[0].text.startswith("waiting for chapter #1-#") and not waits[0].progress
    moving = [w for w in waits if w.progress]
    assert moving, "the progress was never said"
    assert moving[-1].progress.startswith("read ") and ", wrote " in moving[-1].progress
    assert waits[-1].done and waits[-1].text == "waiting for the memory: done"
    assert service.store.memory_state(conv_id).forced_cuts == 0


async def test_a_fold_that_stops_moving_is_given_up_and_lands_later(make_fake_service):
    service, conv_id, clock = await open_folding_chat(
        make_fake_service, LONG_CHAPTER, fold_wait_s=1.0
    )
    Pace(service, clock, step_s=5.0, steps=1)  # the fold is held for 5 s in one go
    events = events_of(service)
    turns = await chat_until_a_turn_waits(service, conv_id)
    waits = waits_in(events)
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


async def test_the_user_can_go_on_without_the_fold(make_fake_service):
    service, conv_id, clock = await open_folding_chat(
        make_fake_service,
        LONG_CHAPTER,
        fold_wait_s=600,  # only the user ends it
    )
    assert not service.go_on_without_fold(conv_id)  # no turn waits
    Pace(service, clock, step_s=1.0, steps=50)
    events = events_of(service)
    answered: list[bool] = []

    def go_on(event: object) -> None:
        # The user goes on once the wait has said how far the fold has got.
        if isinstance(event, FoldWait) and event.progress and not answered:
            answered.append(service.go_on_without_fold(conv_id))

    service.subscribe(go_on)
    turns = await chat_until_a_turn_waits(service, conv_id)
    assert answered and answered[0]
    waits = waits_in(events)
    assert waits[-1].done
    assert waits[-1].text.startswith("waiting for the memory: going on without it, as asked")
    assert turns[-1].prepared.plan.forced_cut_through is not None


async def test_the_wait_has_a_cap_however_the_fold_moves(make_fake_service):
    service, conv_id, clock = await open_folding_chat(
        make_fake_service, LONG_CHAPTER, fold_wait_s=600, fold_wait_max_s=1.0
    )
    Pace(service, clock, step_s=0.3, steps=50)
    events = events_of(service)
    turns = await chat_until_a_turn_waits(service, conv_id)
    waits = waits_in(events)
    assert waits[-1].done
    assert waits[-1].text.startswith("waiting for the memory: not finished after 1 s")
    assert turns[-1].prepared.plan.forced_cut_through is not None
