"""One picture of a conversation's memory: what the prompt carries now and what the next turn
carries, built in one place for the turn, the inspector, `kotonia memory` and the evaluation.

The prompt repeats the stored memory block (`MemoryState.memory_text`) until a fold lands. When
one has (a chapter or a synopsis version the prompt does not carry yet), the next turn applies
the landed memory: the current synopsis, the live chapters and the live ledger fitted to its
share of the window (`memory/ledger.py` `fit_ledger`, counted by the model). A chapter retired
since the block was applied (its messages deleted) is in the block still: the next turn applies
the memory again without it, even when nothing is left to carry. Fitting needs the
model's token counts, so the builder takes the fit as a function and calls it only when there
is landed memory to fit; with nothing landed, the stored block is the whole answer.

The rows come from one read transaction (`Store.memory_rows`): a fold another instance commits
while they are read is in the snapshot whole or not at all, never a chapter's old text beside
the ledger its refold wrote. The fit runs after that read, so no lock is held while counting.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kotonia_tui.domain import StoredChapter, StoredLedgerEntry, StoredSynopsis
from kotonia_tui.memory.assembly import MemoryBlock
from kotonia_tui.memory.ledger import LedgerFit, LeftOut, carried
from kotonia_tui.store.records import MemoryRows, MemoryState

# Fits the live ledger to its share of the window (the turn's own count of each text).
LedgerFitter = Callable[[Sequence[StoredLedgerEntry]], LedgerFit]


@dataclass(frozen=True)
class LandedMemory:
    """The memory as it would be if applied now (the live chapters and the current synopsis)."""

    block: MemoryBlock
    newest_chapter_id: int | None
    synopsis_id: int | None
    covered_through: int  # the last message id it covers (0: none)
    retired: int = 0  # how many of the conversation's chapters are retired (Store.memory_rows)

    def pending(self, state: MemoryState) -> bool:
        """Landed memory the prompt does not carry yet (the next turn applies it). A chapter
        retired since the prompt's block was applied (`MemoryState.applied_retired` counts
        those retired before) is in that block: the memory is applied again without it. An
        empty landed memory beside a stored block always means that block is out of date
        (whatever the counts say: a turn may have applied the retirement before a rebuild
        left the synopsis empty), and applying it stores an empty block, so it is applied
        once."""
        if self.block.empty:
            return bool(state.memory_text)
        return (
            self.newest_chapter_id != state.applied_chapter_id
            or self.synopsis_id != state.applied_synopsis_id
            or self.retired != state.applied_retired
        )


def landed_memory(
    synopsis: StoredSynopsis | None,
    chapters: Sequence[StoredChapter],
    shown: Sequence[StoredLedgerEntry],
    retired: int = 0,
) -> LandedMemory:
    """The landed memory of these rows, carrying the ledger entries `shown`; `retired`: the
    conversation's retired chapters, counted."""
    covered = max(
        [c.last_message_id for c in chapters] + ([synopsis.through_message_id] if synopsis else []),
        default=0,
    )
    return LandedMemory(
        block=MemoryBlock(synopsis.text if synopsis else None, tuple(chapters), tuple(shown)),
        newest_chapter_id=max((c.id for c in chapters), default=None),
        synopsis_id=synopsis.id if synopsis else None,
        covered_through=covered,
        retired=retired,
    )


@dataclass(frozen=True)
class MemorySnapshot:
    """A conversation's memory now and as the next turn carries it."""

    state: MemoryState
    synopsis: StoredSynopsis | None  # the current version
    chapters: tuple[StoredChapter, ...]  # live: not in the synopsis, not superseded
    ledger: tuple[StoredLedgerEntry, ...]  # every entry, ended ones too, in id order
    live_ids: frozenset[int]
    landed: LandedMemory  # with the live ledger fitted (when it is pending)
    pending: bool  # landed memory waits for the next turn
    fit: LedgerFit  # the live entries the next turn carries, and those its share leaves out

    @property
    def live(self) -> list[StoredLedgerEntry]:
        return [e for e in self.ledger if e.id in self.live_ids]

    @property
    def next_text(self) -> str:
        """The memory block the next turn carries: the landed one when a fold has landed."""
        return self.landed.block.render() if self.pending else self.state.memory_text

    @property
    def in_prompt(self) -> frozenset[int]:
        """The ids of the entries the prompt carries now."""
        return carried(self.ledger, self.state.memory_text)

    def left_out(self) -> dict[int, LeftOut]:
        """Why each live entry the prompt does not carry now is out, by id: its share leaves
        it out (of the next turn too), or it landed and the next turn carries it."""
        now = self.in_prompt
        over = {e.id for e in self.fit.left_out}
        return {
            e.id: LeftOut.OVER_SHARE if e.id in over else LeftOut.NEXT_TURN
            for e in self.live
            if e.id not in now
        }


def snapshot_of(rows: MemoryRows, fit: LedgerFitter) -> MemorySnapshot:
    """The memory of rows read together (`Store.memory_rows`, which may read more for the
    caller: the inspector's synopsis versions and fold jobs); `fit` is called (once) only when
    landed memory with live ledger entries is pending."""
    state, retired, synopsis = rows.state, rows.retired, rows.synopsis
    chapters, live = rows.chapters, rows.live
    live_ids = frozenset(e.id for e in live)
    unfitted = landed_memory(synopsis, chapters, live, retired)
    pending = unfitted.pending(state)
    if pending:
        fitted = fit(live) if live else LedgerFit((), ())
        landed = landed_memory(synopsis, chapters, fitted.shown, retired)
    else:
        # The stored block is what the next turn carries: its ledger is the fit made when it
        # was applied, and every live entry it does not carry is over the share.
        shown = carried(live, state.memory_text)
        fitted = LedgerFit(
            tuple(e for e in live if e.id in shown), tuple(e for e in live if e.id not in shown)
        )
        landed = unfitted
    return MemorySnapshot(
        state=state,
        synopsis=synopsis,
        chapters=tuple(chapters),
        ledger=tuple(rows.ledger),
        live_ids=live_ids,
        landed=landed,
        pending=pending,
        fit=fitted,
    )
