"""What the memory inspector shows: the memory as the next prompt will carry it, and the figures.

Built from the same bounded reads as a turn, so opening the inspector on a 20,000-message
conversation costs what a turn costs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from kotonia_tui.chat.chat_settings import TurnSettings
from kotonia_tui.chat.events import RunningFold
from kotonia_tui.chat.lore import LoreTurn
from kotonia_tui.chat.numbering import Span, chapter_span, evidence_said, job_label
from kotonia_tui.domain import (
    Chapter,
    DepthNote,
    FoldJob,
    FoldStatus,
    StoredChapter,
    StoredFoldJob,
    StoredLedgerEntry,
    StoredMessage,
    StoredSynopsis,
    TurnMetrics,
)
from kotonia_tui.memory.budgets import Budgets
from kotonia_tui.memory.recall import Recall


@dataclass(frozen=True)
class BudgetBar:
    """The next prompt against the window, in tokens."""

    n_ctx: int
    setup: int
    memory: int
    verbatim: int
    reply_reserve: int
    trigger: int  # history (memory + verbatim) past this queues a fold
    ceiling: int  # history past this with nothing to apply cuts the oldest verbatim

    @property
    def used(self) -> int:
        return self.setup + self.memory + self.verbatim + self.reply_reserve

    @property
    def history(self) -> int:
        return self.memory + self.verbatim


@dataclass(frozen=True)
class ChapterView:
    chapter: StoredChapter
    applied: bool  # the prompt carries it (False: landed, applied on the next turn)


@dataclass(frozen=True)
class MemoryView:
    """What the inspector shows. The rows' texts (synopsis versions, chapters' texts and notes,
    ledger entries, fold errors) are as shown: their message references numbered per
    conversation (chat/numbering.py); the rows' id fields stay store ids, shown by `number`."""

    conversation_id: int
    synopsis: (
        StoredSynopsis | None
    )  # the version the prompt carries (or the newest, if none applied)
    synopsis_versions: list[StoredSynopsis]
    chapters: list[ChapterView]
    verbatim_start_id: int | None
    verbatim_first: StoredMessage | None
    verbatim_messages: int
    verbatim_tokens: int
    budget: BudgetBar
    budgets: Budgets
    fold_jobs: list[StoredFoldJob]
    running: RunningFold | None  # the job generating now, its elapsed seconds and its label
    last_metrics: TurnMetrics | None
    forced_cut_through_id: int | None
    pending_apply: bool  # landed memory waits for the next turn
    forced_cuts: int = 0  # how many times messages left the prompt at the ceiling
    room_note: str = ""  # said when the card's setup squeezes the story's budgets
    notes: list[str] = field(default_factory=list)
    # Every ledger entry, ended ones too (shown as "#1-#4 to #5-#9, resolved": its chapters).
    ledger: list[StoredLedgerEntry] = field(default_factory=list)
    # The ids of those the prompt carries now (a live entry may be out: over the ledger's
    # share, or landed and applied by the next turn).
    ledger_in_prompt: frozenset[int] = frozenset()
    # The ids of live entries the ledger's share left out of the memory block (in the store).
    ledger_left_out: frozenset[int] = frozenset()
    settings: TurnSettings | None = None  # None: the card is missing (no turn can run)
    note_tokens: int = 0  # the Author's Note
    # The card's Character's Note (in a group, the cast's, as the next turn carries them),
    # each with its tokens.
    character_notes: tuple[tuple[DepthNote, int], ...] = ()
    post_history_tokens: int = 0  # the card's post-history instructions
    lore: LoreTurn | None = None  # the last turn's lorebook entries (None: no turn yet)
    recall: Recall | None = None  # what the last turn recalled from the archive (None: no turn)
    recall_by: str = ""  # what recall matches by (chat/semantic.py `matches_by`)
    # Message ids mentioned above -> their place in the conversation (1 = the first message):
    # the UI numbers messages per conversation, the store numbers them across all of them.
    numbers: dict[int, int] = field(default_factory=dict)
    # The chapters listed above and those the ledger names (written or ended by, refolded or
    # in the synopsis since) -> the numbers of their first and last messages, as `numbers`
    # (chat/numbering.py `range_numbers`: () when none of its messages is left).
    chapter_numbers: dict[int, Span] = field(default_factory=dict)
    # The messages the ledger's entries rest on (their evidence) that are still stored -> their
    # numbers, as `numbers`; one an entry cites that is not here was deleted (`evidence`).
    cited: dict[int, int] = field(default_factory=dict)

    def number(self, message_id: int | None) -> str:
        """ "#N" for a message id, N counted within the conversation."""
        if message_id is None:
            return "#?"
        return f"#{self.numbers.get(message_id, message_id)}"

    def evidence(self, ids: Iterable[int]) -> str:
        """ "#5 #7": the messages a ledger entry rests on, by their numbers; a deleted one in
        words ("#5 and a deleted message": chat/numbering.py `evidence_said`), never as the
        number of the message before it."""
        return evidence_said(self.cited.get(i) for i in ids)

    def chapter_span(self, chapter_id: int | None) -> str:
        """ "#309-#316": a chapter by its messages' numbers (chat/numbering.py), as the user
        knows it; a chapter id it does not hold, or one with no message left, reads as words,
        never as a number."""
        return chapter_span(
            self.chapter_numbers.get(chapter_id) if chapter_id is not None else None
        )

    def job_label(self, job: FoldJob) -> str:
        """ "chapter #5-#9", "refold #36-#38", "major fold": a fold job by its kind and the
        range it folds in `numbers` (chat/numbering.py), never by its store id."""
        return job_label(job, self.numbers)

    @property
    def queued(self) -> list[StoredFoldJob]:
        return [j for j in self.fold_jobs if j.status is FoldStatus.PENDING]

    @property
    def failed(self) -> list[StoredFoldJob]:
        return [j for j in self.fold_jobs if j.status is FoldStatus.FAILED]

    def age_of(self, chapter: Chapter, now: datetime) -> float:
        return (now - chapter.created_at).total_seconds()
