"""Replies first: work that can wait never runs on the cores while a reply is being made.

The owner thread (owner.py) orders the model's own calls, so a fold or a settle never runs
beside a reply there. Work on other threads could: the writer that puts a saved KV state on
disk (state_cache.py: hashing and copying megabytes, gigabytes for a big model) and the
embedding model (embedding.py, its own llama.cpp threads). On a machine with few cores one
such thread beside the reply's llama.cpp threads slows the reply far more than its own share
of the CPU (engine/threads.py says why). So such work asks this gate before each small unit
(a few MiB written, one piece of text embedded): it waits while a reply runs, and a reply
that starts waits for the unit in progress, never for more. A reply is a job of the most
urgent priority on an owner thread, from its first step to its last.

A user turn is announced before its reply starts (`turn_coming`): while its prompt is being
prepared (reading, planning, quoting what it would cut, recall) the owner thread starts no
background step, so a refold or a major fold does not take the cores from the preparation,
and the reply does not wait for a step begun meanwhile. The announcement lapses after
TURN_COMING_MAX_S, so a preparation that waits for background work is slowed, never stuck.

`FOREGROUND` is the process's gate: the cores are the process's, whatever engine uses them.

For tests, the gate can keep an `ActivityLog`: when each reply and each unit of background
work (the owner thread's background steps included) started and ended, so a test can check
that none overlapped, with the real engine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

# An announced turn holds background model steps back at most this long (its preparation is
# code and counting: well under a second; a turn that waits for a fold releases them).
TURN_COMING_MAX_S = 10.0

REPLY = "reply"
STATE_WRITE = "state write"
EMBEDDING = "embedding"
MODEL_BACKGROUND = "model background"  # a step of a background job on an owner thread


@dataclass(frozen=True)
class Interval:
    """Something that ran, from `start` to `end` (time.monotonic seconds)."""

    kind: str
    start: float
    end: float

    def overlaps(self, other: Interval) -> bool:
        return self.start < other.end and other.start < self.end


@dataclass
class ActivityLog:
    """What ran when (a test hook; the engine keeps none unless a test asks).

    `hold_background_s` makes each unit of background work last at least that long, as a
    slow disk or a big embedding model would, so a unit that could overlap a reply does.
    """

    hold_background_s: float = 0.0
    intervals: list[Interval] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, kind: str, start: float, end: float) -> None:
        with self._lock:
            self.intervals.append(Interval(kind, start, end))

    def of(self, kind: str) -> list[Interval]:
        with self._lock:
            return [i for i in self.intervals if i.kind == kind]

    def overlapping_replies(self) -> list[tuple[Interval, Interval]]:
        """Each (reply, background unit) pair that ran at the same time."""
        with self._lock:
            replies = [i for i in self.intervals if i.kind == REPLY]
            others = [i for i in self.intervals if i.kind != REPLY]
        return [(r, o) for r in replies for o in others if r.overlaps(o)]


class Foreground:
    """Counts the replies running and the background units in progress; each side waits
    for the other to be done (a reply for one unit at most, since a waiting reply stops
    new units from starting)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._replies = 0
        self._units = 0
        self._reply_since = 0.0
        self._coming = 0  # user turns announced and not started yet
        self._coming_since = 0.0
        self.log: ActivityLog | None = None

    @property
    def replying(self) -> bool:
        return self._replies > 0

    @property
    def working(self) -> bool:
        """A unit of background work is in progress."""
        return self._units > 0

    @property
    def turn_coming(self) -> bool:
        """A user turn is being prepared (announced less than TURN_COMING_MAX_S ago): the
        owner thread holds its background steps until the reply starts."""
        with self._changed:
            return self._coming > 0 and time.monotonic() - self._coming_since < TURN_COMING_MAX_S

    @contextmanager
    def announce_turn(self) -> Iterator[None]:
        """A user turn is prepared inside this block and its reply call queued before it
        ends (background model steps wait meanwhile, see `turn_coming`)."""
        with self._changed:
            if self._coming == 0:
                self._coming_since = time.monotonic()
            self._coming += 1
        try:
            yield
        finally:
            with self._changed:
                self._coming -= 1

    def begin_reply(self) -> None:
        """A reply starts (on an owner thread): wait until the unit in progress ends."""
        with self._changed:
            self._replies += 1
            while self._units:
                self._changed.wait()
            if self._replies == 1:
                self._reply_since = time.monotonic()

    def end_reply(self) -> None:
        with self._changed:
            self._replies -= 1
            if self._replies == 0:
                if self.log is not None:
                    self.log.add(REPLY, self._reply_since, time.monotonic())
                self._changed.notify_all()

    @contextmanager
    def background(self, kind: str) -> Iterator[None]:
        """One small unit of work that can wait: it starts when no reply runs."""
        with self._changed:
            while self._replies:
                self._changed.wait()
            self._units += 1
        log = self.log
        started = time.monotonic()
        try:
            yield
            if log is not None and log.hold_background_s > 0:
                time.sleep(log.hold_background_s)
        finally:
            ended = time.monotonic()
            with self._changed:
                self._units -= 1
                self._changed.notify_all()
            if log is not None:
                log.add(kind, started, ended)

    def record(self, kind: str, started: float) -> None:
        """Log a unit that the owner thread ran itself (it never overlaps a reply there)."""
        if self.log is not None:
            self.log.add(kind, started, time.monotonic())


FOREGROUND = Foreground()
