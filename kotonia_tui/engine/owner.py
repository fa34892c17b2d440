"""The owner thread: the only thread that touches the model, one small step at a time.

Every model call is a generator that does one unit of work per step (a prompt batch, a token)
and runs on this thread. Between steps the thread picks the most urgent job, so a user turn that
arrives while a background fold is generating runs first; the fold resumes afterwards exactly
where it stopped (it has its own KV context). Never two model calls at once: this is the lock.

A job of the most urgent priority (a reply, or a quick call a reply waits for) holds the
process's foreground (foreground.py) from its first step until no such job is left: work on
other threads that can wait (a state file being written, the embedding model) pauses
meanwhile, so the reply has the cores to itself.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from kotonia_tui.engine.errors import EngineClosedError
from kotonia_tui.engine.foreground import FOREGROUND, MODEL_BACKGROUND, Foreground

log = logging.getLogger(__name__)

Steps = Generator[Any, None, Any]

FOREGROUND_PRIORITY = 0  # Priority.INTERACTIVE: a user's turn (types.py)
TURN_POLL_S = 0.02  # how often a held background step looks again for the announced reply


@dataclass(order=True)
class _Job:
    priority: int
    seq: int
    start: Callable[[], Steps] = field(compare=False)
    on_event: Callable[[Any], None] = field(compare=False)
    future: Future[Any] = field(compare=False)
    steps: Steps | None = field(default=None, compare=False)


class OwnerThread:
    """Runs step generators on one thread, most urgent first (lower priority value wins)."""

    def __init__(self, name: str = "kotonia-model", foreground: Foreground = FOREGROUND) -> None:
        self._foreground = foreground
        self._holding = False  # the foreground, while a most urgent job is active
        self._inbox: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._seq = itertools.count()
        self._closed = False
        self._final: Callable[[], None] | None = None
        self._busy = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(
        self,
        start: Callable[[], Steps],
        *,
        priority: int,
        on_event: Callable[[Any], None] = lambda _event: None,
    ) -> Future[Any]:
        """Queue a job; `start()` is called on the owner thread and returns its step generator.

        Each value a step yields (other than None) goes to `on_event`, on the owner thread.
        The future resolves with the generator's return value or its exception.
        """
        if self._closed:
            raise EngineClosedError("the engine is closed")
        future: Future[Any] = Future()
        self._inbox.put(_Job(priority, next(self._seq), start, on_event, future))
        return future

    def call(self, fn: Callable[[], Any], *, priority: int = 0) -> Future[Any]:
        """Run a plain function on the owner thread (loading, closing, projector work)."""

        def start() -> Steps:
            return fn()
            yield  # pragma: no cover - makes this a generator

        return self.submit(start, priority=priority)

    @property
    def busy(self) -> bool:
        return self._busy.is_set()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, final: Callable[[], None] | None = None, timeout: float = 30.0) -> None:
        """Stop: running jobs are closed first, then `final` runs on the owner thread."""
        if self._closed:
            return
        self._closed = True
        self._final = final
        self._inbox.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        active: list[_Job] = []
        while True:
            # A user turn is being prepared: no background step starts until its reply comes
            # (foreground.py), so the loop waits for arrivals a moment at a time.
            held = bool(active) and self._held_for_turn(active[0])
            poll = TURN_POLL_S if held else None
            arrived = self._arrivals(block=not active or held, timeout=poll)
            if None in arrived:
                active.extend(job for job in arrived if job is not None)
                self._shutdown(active)
                return
            for job in arrived:
                if job is not None:
                    heapq.heappush(active, job)
            if not active or self._held_for_turn(active[0]):
                continue
            self._busy.set()
            job = active[0]
            urgent = job.priority <= FOREGROUND_PRIORITY
            if urgent and not self._holding:
                self._foreground.begin_reply()
                self._holding = True
            started = time.monotonic()
            if self._step(job):
                heapq.heappop(active)
            if not urgent:
                self._foreground.record(MODEL_BACKGROUND, started)
            if self._holding and not (active and active[0].priority <= FOREGROUND_PRIORITY):
                self._foreground.end_reply()
                self._holding = False
            if not active:
                self._busy.clear()

    def _held_for_turn(self, job: _Job) -> bool:
        """`job` is background work and a user turn is announced: it waits."""
        return job.priority > FOREGROUND_PRIORITY and self._foreground.turn_coming

    def _arrivals(self, *, block: bool, timeout: float | None = None) -> list[_Job | None]:
        """Everything in the inbox now; with `block`, wait for the first item (at most
        `timeout` seconds when given)."""
        arrived: list[_Job | None] = []
        try:
            arrived.append(self._inbox.get(block=block, timeout=timeout))
            while True:
                arrived.append(self._inbox.get_nowait())
        except queue.Empty:
            pass
        return arrived

    def _step(self, job: _Job) -> bool:
        """Advance a job by one step; True when it finished (either way)."""
        if job.future.cancelled():
            if job.steps is not None:
                job.steps.close()
            return True
        try:
            if job.steps is None:
                job.future.set_running_or_notify_cancel()
                job.steps = job.start()
            event = next(job.steps)
        except StopIteration as stop:
            job.future.set_result(stop.value)
            return True
        except BaseException as exc:
            if not job.future.done():
                job.future.set_exception(exc)
            return True
        if event is not None:
            try:
                job.on_event(event)
            except Exception:  # a broken listener must not kill the model thread
                log.exception("stream listener failed")
        return False

    def _shutdown(self, active: list[_Job]) -> None:
        if self._holding:
            self._foreground.end_reply()
            self._holding = False
        # Jobs still queued behind the sentinel are refused as well.
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                active.append(item)
        for job in active:
            if job.steps is not None:
                try:
                    job.steps.close()
                except Exception:
                    log.exception("a model job failed while closing")
            if not job.future.done():
                job.future.set_exception(EngineClosedError("the engine was closed"))
        if self._final is not None:
            try:
                self._final()
            except Exception:
                log.exception("releasing the model failed")
