"""What the chat service tells its callers (the TUI, the CLI) while a turn or a fold runs."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from kotonia_tui.domain import MessageStatus, StoredFoldJob, StoredMessage, TurnMetrics
from kotonia_tui.engine import (
    ReasoningDelta,  # a piece of thinking, passed on as the engine gives it
)


@dataclass(frozen=True)
class ReplyDelta:
    """A piece of the reply as it streams."""

    text: str


class TurnOutcome(StrEnum):
    """How a turn ended. Whatever the outcome, what the model wrote is stored."""

    COMPLETED = "completed"  # the reply ended by itself: whole, or cut by its cap or the window
    CANCELLED = "cancelled"  # the user stopped it (Esc)
    INTERRUPTED = "interrupted"  # its caller went away: Ctrl-C, the chat closed, the app quit
    FAILED = "failed"  # the model call or the store failed


@dataclass(frozen=True)
class TurnDone:
    """The turn ended. `reply` is stored (even when cut or stopped); `error` says why not."""

    reply: StoredMessage | None
    metrics: TurnMetrics | None
    error: str | None = None
    outcome: TurnOutcome = TurnOutcome.COMPLETED

    @property
    def cut(self) -> bool:
        return self.reply is not None and self.reply.status is not MessageStatus.COMPLETE


TurnEvent = ReplyDelta | ReasoningDelta | TurnDone

__all__ = [
    "FoldProgress",
    "FoldState",
    "FoldWait",
    "MemoryNotice",
    "NoticeLevel",
    "ReasoningDelta",
    "ReplyDelta",
    "ServiceEvent",
    "TurnDone",
    "TurnEvent",
    "TurnOutcome",
    "TurnPrepared",
]


class NoticeLevel(StrEnum):
    INFO = "info"
    WARNING = "warning"


@dataclass(frozen=True)
class MemoryNotice:
    """Something the memory did that the user should see (a fold applied, a forced cut)."""

    conversation_id: int
    text: str
    level: NoticeLevel = NoticeLevel.INFO


class FoldState(StrEnum):
    """What happened to a fold job (the job's stored status says where it stands now)."""

    QUEUED = "queued"
    RUNNING = "running"
    DEFERRED = "deferred"  # the model server is down or busy: back to pending, not a failure
    LANDED = "landed"  # its chapter or synopsis is stored; the next turn applies it
    FAILED = "failed"  # this attempt failed; `job.not_before` says when it runs again, if ever


@dataclass(frozen=True)
class FoldProgress:
    """A fold job changed state (`elapsed_s`: how long it ran, when it landed). `label` names
    the job as a person reads it, by its kind and range in message numbers ("chapter #5-#9",
    chat/numbering.py `told` sets it; never the job's store id): what to show, `job_label`."""

    conversation_id: int
    job: StoredFoldJob
    state: FoldState
    detail: str = ""
    elapsed_s: float = 0.0
    label: str = ""

    @property
    def job_label(self) -> str:
        """`label`, or the job's kind alone when none was set."""
        return self.label or self.job.kind.label


class RunningFold(NamedTuple):
    """The fold job running now, as the status line and the inspector's fold queue show it
    each second: the job, how long it has run, and `label`, the job as its events name it
    ("chapter #5-#9"; chat/numbering.py `job_label`). The label is read by the worker when
    the job starts and again when a deletion or a restore renumbers its conversation
    (`FoldWorker.renumber`), so those ticks read no store, and it names the range even when
    the inspector's view was read before the job was queued (the rest of a range too large
    for one call is queued with no event of its own). The kind alone only when the store could
    not number the range when the job started."""

    job: StoredFoldJob
    elapsed_s: float
    label: str


@dataclass(frozen=True)
class FoldWait:
    """A turn waits for fold jobs before it is built (`done`: the wait is over), so that
    messages stay in the memory instead of leaving the prompt at the ceiling."""

    conversation_id: int
    job_ids: tuple[int, ...]
    text: str
    done: bool = False
    progress: str = ""  # how far the fold has got ("read 1,240 tokens, wrote 85 · 2 min 05 s")


@dataclass(frozen=True)
class TurnPrepared:
    """A turn's prompt is made: the notices of the turn before are stale now, and a fold that
    had landed is in the prompt when `fold_applied`. Its own notices follow."""

    conversation_id: int
    fold_applied: bool


ServiceEvent = MemoryNotice | FoldProgress | FoldWait | TurnPrepared
