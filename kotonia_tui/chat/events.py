"""What the chat service tells its callers (the TUI, the CLI) while a turn or a fold runs."""

from __future__ import annotations

from dataclasses import dataclass

from kotonia_tui.domain import FoldJob, Message, TurnMetrics
from kotonia_tui.engine import (
    ReasoningDelta,  # a piece of thinking, passed on as the engine gives it
)


@dataclass(frozen=True)
class ReplyDelta:
    """A piece of the reply as it streams."""

    text: str


@dataclass(frozen=True)
class TurnDone:
    """The turn ended. `reply` is stored (even when cut or cancelled); `error` says why not."""

    reply: Message | None
    metrics: TurnMetrics | None
    error: str | None = None

    @property
    def cut(self) -> bool:
        return self.reply is not None and self.reply.status.value != "complete"


TurnEvent = ReplyDelta | ReasoningDelta | TurnDone

__all__ = [
    "FoldProgress",
    "MemoryNotice",
    "ReasoningDelta",
    "ReplyDelta",
    "ServiceEvent",
    "TurnDone",
    "TurnEvent",
]


@dataclass(frozen=True)
class MemoryNotice:
    """Something the memory did that the user should see (a fold applied, a forced cut)."""

    conversation_id: int
    text: str
    level: str = "info"  # info | warning


@dataclass(frozen=True)
class FoldProgress:
    """A fold job changed state: queued, running (with elapsed time), landed, failed."""

    conversation_id: int
    job: FoldJob
    state: str  # queued | running | landed | failed | idle
    detail: str = ""
    elapsed_s: float = 0.0


ServiceEvent = MemoryNotice | FoldProgress
