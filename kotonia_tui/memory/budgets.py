"""Token budgets of one conversation, derived from the model's context window.

Every figure is a fraction of n_ctx (settings), so a 8k model and a 64k model fold at the same
relative points. The defaults are scaled from production figures (seed 002): trigger ~47%,
ceiling ~55%, minimum verbatim ~16%, major GC past ~6% of chapters, a chapter's source at most
~30%. After a fold the history settles at `trigger - headroom`: the headroom is fixed, so the
time between folds does not shrink as the memory grows. Very wide windows keep far more
verbatim and fold rarely.

A character setup takes its share of the window before the story does. When setup, notes and
reply leave less room than the ceiling wants, the story's budgets (trigger, ceiling, minimum
verbatim, headroom, the major fold's threshold, the synopsis target) shrink together by the same
factor (`with_setup`): the trigger never collapses onto the ceiling, so a fold is queued turns
before anything has to be cut, at every window and setup size.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kotonia_tui.config import Settings

# The trigger stays at least this share of the ceiling below it, whatever the settings say:
# the turns in between are what give a fold the time to land before anything is cut.
MIN_GAP_SHARE = 0.1
# A synopsis shorter than this holds hardly anything: its target never goes below it.
MIN_SYNOPSIS_TOKENS = 32
# A synopsis (and a quote in its place) holds its target length within this share either way
# (enforced by the fold's synopsis job). When no call lands within it, the longest short draft
# is stored, however short, as long as it keeps THIN_SHARE of what a quote of its target keeps
# (else the quote is stored: D-44): a short synopsis never grows the memory, and refusing one
# held every major fold of a small model that cannot count words (docs/decisions.md D-8). A draft
# too long is never stored: it is asked again with the draft, and at the end the synopsis is
# quoted (chat/fold/synopsis.py).
LENGTH_TOLERANCE = 0.2
# Kept out of the window beside setup, history and reply (separators the template adds).
SAFETY_TOKENS = 16


def capped(tokens: int, cap: int) -> int:
    """`tokens`, at most `cap` (0: no cap)."""
    return min(tokens, cap) if cap > 0 else tokens


def recall_takes_room(setting: bool | None, semantic: bool) -> bool:
    """Whether recall also takes the room a short window leaves under the trigger
    (`Budgets.recall_with_room`): as `recall_free_room` says, and unset, when recall is by
    meaning too (`semantic`), whose hits rank past what the share alone holds (docs/decisions.md
    D-40, D-41)."""
    return semantic if setting is None else setting


@dataclass(frozen=True)
class Budgets:
    n_ctx: int
    reply_reserve: int
    trigger: int  # history (memory + verbatim) above this queues a fold
    ceiling: int  # history above this with no chapter to apply cuts the oldest verbatim
    min_verbatim: int  # a fold never leaves less verbatim than this
    headroom: int  # after a fold, history = trigger - headroom (when the minimum allows)
    major_gc: int  # chapters (not yet in the synopsis) above this fold into the synopsis
    major_gc_min_chapters: int  # ... and only when at least this many can be folded at once
    chapter_source: int  # one chapter summarizes at most this much source
    synopsis_target: int  # the length a synopsis is written to hold (within +-20%)
    summary_max_tokens: int  # a ceiling so nothing is cut, not a target
    lore: int  # keyed lorebook entries per turn
    recall: int  # recalled archive excerpts per turn (0: recall is off)
    ledger: int  # the live ledger in the memory block (past it, the newest entries leave it first)
    wide: bool
    recall_cap: int = 0  # the most a turn recalls, the room included (0: no cap)
    fixed_tokens: int = 0  # setup, picture and notes these budgets were fitted to
    scale: float = 1.0  # the share of the window's budgets the setup left (1.0: all of them)

    @property
    def settle(self) -> int:
        """History size right after a fold is applied."""
        return self.trigger - self.headroom

    @property
    def chapters_cap(self) -> int:
        """The most the live chapters may hold: beside a synopsis of its target size they must
        leave the minimum verbatim under the trigger."""
        return max(self.major_gc, self.trigger - self.min_verbatim - self.synopsis_target)

    @property
    def story_room(self) -> int:
        """Tokens the story (memory and verbatim) can have beside the setup and the reply."""
        return self.n_ctx - self.reply_reserve - self.fixed_tokens - SAFETY_TOKENS

    @property
    def squeezed(self) -> bool:
        """The setup leaves less room than the window's budgets want: they were shrunk."""
        return self.scale < 1.0

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
        trigger = min(trigger, int(ceiling * (1 - MIN_GAP_SHARE)))
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
            major_gc_min_chapters=settings.major_gc_min_chapters,
            chapter_source=max(64, int(n_ctx * settings.chapter_source_ratio)),
            synopsis_target=max(MIN_SYNOPSIS_TOKENS, int(n_ctx * settings.synopsis_target_ratio)),
            summary_max_tokens=settings.summary_max_tokens,
            lore=int(n_ctx * settings.lore_budget_ratio),
            recall=capped(int(n_ctx * settings.recall_budget_ratio), settings.recall_max_tokens),
            ledger=int(n_ctx * settings.ledger_budget_ratio),
            wide=wide,
            recall_cap=settings.recall_max_tokens,
        )

    def with_setup(self, fixed_tokens: int) -> Budgets:
        """The budgets beside a setup (and notes, picture) of `fixed_tokens`.

        When the room left for the story is below the ceiling, every story budget shrinks by
        the same factor, so trigger and ceiling keep their gap, and the minimum verbatim and
        the memory's sizes keep their proportions (a smaller verbatim floor, not a trigger
        stuck on the ceiling).
        """
        base = replace(self, fixed_tokens=fixed_tokens, scale=1.0)
        room = base.story_room
        if room >= self.ceiling:
            return base
        scale = max(room, 1) / self.ceiling

        def shrink(value: int) -> int:
            return int(value * scale)

        return replace(
            base,
            ceiling=max(room, 1),
            trigger=shrink(self.trigger),
            min_verbatim=shrink(self.min_verbatim),
            headroom=shrink(self.headroom),
            major_gc=shrink(self.major_gc),
            synopsis_target=max(MIN_SYNOPSIS_TOKENS, shrink(self.synopsis_target)),
            scale=scale,
        )

    def recall_with_room(self, recall: int, history_tokens: int) -> int:
        """A turn's recall budget: its share (`recall`), and the room a history of
        `history_tokens` leaves under the trigger, up to as much again. Right after a fold the
        window is at its shortest and the archive has just grown; the prompt then has room that
        nothing uses until the window grows back, and the recalled lines use it. The prompt is
        never larger than at the trigger, where it always fits (`with_setup`); what it costs is
        positions evaluated each turn (recalled lines are read again every turn). Recall off
        (0) stays off, and `recall_cap` bounds the sum."""
        return capped(recall + min(recall, max(0, self.trigger - history_tokens)), self.recall_cap)

    def room_note(self, who: str) -> str:
        """One line saying how the setup squeezes the story ("" when it does not)."""
        if not self.squeezed:
            return ""
        wanted = round(self.ceiling / self.scale)
        return (
            f"{who}'s setup leaves too little room: it takes {self.fixed_tokens:,} tokens of the "
            f"{self.n_ctx:,}-token window and the reply {self.reply_reserve:,}, leaving "
            f"{self.story_room:,} for the story where the memory budgets want {wanted:,}; "
            f"they are shrunk to {self.scale:.0%}: fold at {self.trigger:,}, ceiling "
            f"{self.ceiling:,}, verbatim at least {self.min_verbatim:,}, synopsis "
            f"{self.synopsis_target:,} (a larger n_ctx or a shorter card gives the story more)"
        )
