"""A user turn announced while its prompt is prepared holds the owner thread's background steps
(engine/foreground.py, issue 30): a refold makes no progress from the announcement until the
reply has started, the reply runs, and the refold goes on after it.

The real OwnerThread with step generators and a Foreground of its own (no model: what is tested
is which step runs when, not what a step computes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator

from kotonia_tui.engine import foreground as foreground_module
from kotonia_tui.engine.foreground import Foreground
from kotonia_tui.engine.owner import OwnerThread
from kotonia_tui.engine.types import Priority


class Steps:
    """A job that records when each of its steps ran, until told to stop."""

    def __init__(self, name: str, log: list[tuple[str, float]], count: int) -> None:
        self.name, self.log, self.count = name, log, count

    def __call__(self) -> Generator[None, None, str]:
        for _index in range(self.count):
            self.log.append((self.name, time.monotonic()))
            time.sleep(0.002)
            yield None
        return self.name


def _steps_of(log: list[tuple[str, float]], name: str) -> int:
    return sum(1 for who, _at in list(log) if who == name)


def _wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_background_steps_wait_from_the_announcement_until_the_reply_has_run():
    gate = Foreground()
    owner = OwnerThread("test-owner", foreground=gate)
    log: list[tuple[str, float]] = []
    try:
        refold = owner.submit(Steps("refold", log, 400), priority=int(Priority.BACKGROUND))
        _wait_for(lambda: _steps_of(log, "refold") >= 3)

        with gate.announce_turn():
            time.sleep(0.02)  # a step under way when the turn was announced ends
            before = _steps_of(log, "refold")
            time.sleep(0.3)  # the turn's prompt is being prepared
            held = _steps_of(log, "refold") - before
            reply = owner.submit(Steps("reply", log, 20), priority=int(Priority.INTERACTIVE))
        assert reply.result(timeout=5) == "reply"
        assert refold.result(timeout=10) == "refold"
    finally:
        owner.close()

    assert held == 0
    reply_times = [at for who, at in log if who == "reply"]
    during_reply = [at for who, at in log if who == "refold" and at <= reply_times[-1]]
    # No refold step between the announcement and the reply's last step (the ones before
    # the announcement are all there was).
    assert len(during_reply) == before
    assert _steps_of(log, "refold") == 400


def test_an_announcement_that_lasts_too_long_lapses(monkeypatch):
    """A preparation that waits for background work is slowed, never stuck."""
    monkeypatch.setattr(foreground_module, "TURN_COMING_MAX_S", 0.2)
    gate = Foreground()
    owner = OwnerThread("test-owner", foreground=gate)
    log: list[tuple[str, float]] = []
    done = threading.Event()
    try:
        with gate.announce_turn():
            started = time.monotonic()
            job = owner.submit(Steps("fold", log, 5), priority=int(Priority.BACKGROUND))
            job.add_done_callback(lambda _f: done.set())
            assert done.wait(5)
            waited = time.monotonic() - started
    finally:
        owner.close()
    assert 0.15 <= waited < 3
