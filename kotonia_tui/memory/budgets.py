"""Token budgets of one conversation, derived from the model's context window.

Every figure is a fraction of n_ctx (settings), so a 8k model and a 64k model fold at the same
relative points. The defaults are scaled from production figures (seed 002): trigger ~47%,
ceiling ~55%, minimum verbatim ~16%, major GC past ~6% of chapters, a chapter's source at most
~30%. After a fold the history settles at `trigger - headroom`: the headroom is fixed, so the
time between folds does not shrink as the memory grows. Very wide windows keep far more
verbatim and fold rarely.
"""

from __future__ import annotations

from dataclasses import dataclass

from kotonia_tui.config import Settings


@dataclass(frozen=True)
class Budgets:
    n_ctx: int
    reply_reserve: int
    trigger: int  # history (memory + verbatim) above this queues a fold
    ceiling: int  # history above this with no chapter to apply cuts the oldest verbatim
    min_verbatim: int  # a fold never leaves less verbatim than this
    headroom: int  # after a fold, history = trigger - headroom (when the minimum allows)
    major_gc: int  # chapters (not yet in the synopsis) above this fold into the synopsis
    chapter_source: int  # one chapter summarizes at most this much source
    summary_max_tokens: int  # a ceiling so nothing is cut, not a target
    lore: int  # keyed lorebook entries per turn
    recall: int  # recalled archive excerpts per turn (0: recall is off)
    ledger: int  # the live ledger in the memory block (past it, the oldest entries leave it)
    wide: bool

    @property
    def settle(self) -> int:
        """History size right after a fold is applied."""
        return self.trigger - self.headroom

    @classmethod
    def for_window(cls, n_ctx: int, reply_reserve: int, settings: Settings) -> Budgets:
        wide = n_ctx >= settings.wide_window_ctx
        if wide:
            # Wide windows: keep most of the window verbatim and fold rarely (seed 002: cloud
            # models keep ~200,000 characters verbatim instead of summarizing them).
            trigger = int(n_ctx * settings.wide_window_verbatim_ratio)
            ceiling = int(n_ctx * min(0.9, settings.wide_window_verbatim_ratio + 0.08))
        else:
            trigger = int(n_ctx * settings.fold_trigger_ratio)
            ceiling = int(n_ctx * settings.fold_ceiling_ratio)
        # The reply must always fit beside the history.
        ceiling = min(ceiling, n_ctx - reply_reserve - 64)
        trigger = min(trigger, ceiling)
        min_verbatim = min(int(n_ctx * settings.min_verbatim_ratio), trigger)
        headroom = min(int(n_ctx * settings.fold_headroom_ratio), max(0, trigger - min_verbatim))
        return cls(
            n_ctx=n_ctx,
            reply_reserve=reply_reserve,
            trigger=trigger,
            ceiling=ceiling,
            min_verbatim=min_verbatim,
            headroom=headroom,
            major_gc=int(n_ctx * settings.major_gc_ratio),
            chapter_source=max(64, int(n_ctx * settings.chapter_source_ratio)),
            summary_max_tokens=settings.summary_max_tokens,
            lore=int(n_ctx * settings.lore_budget_ratio),
            recall=int(n_ctx * settings.recall_budget_ratio),
            ledger=int(n_ctx * settings.ledger_budget_ratio),
            wide=wide,
        )
