"""The fold policy: for one turn, what the prompt carries and what folding to queue.

Rules (docs/architecture.md, "One fold"):
- Crossing the trigger queues a chapter job; the crossing turn itself changes nothing.
- The first turn after a chapter (or synopsis) lands applies it; only that turn changes the
  prompt prefix. The verbatim window then starts right after what the memory covers.
- The range folded is chosen so that, after the fold, history settles at trigger - headroom,
  leaving at least the minimum verbatim.
- Past the ceiling with nothing to apply, the oldest verbatim messages leave the prompt anyway
  (they stay stored, and folding still covers them later); the cut goes down to the settle
  level, so the next turns keep a stable prefix instead of cutting again every turn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from kotonia_tui.memory.budgets import Budgets

# A chapter is roughly this fraction of its source (seed 002: ~17,000 characters folded into a
# ~1,100-character chapter). Only used to aim the range; the real size is measured on landing.
EXPECTED_CHAPTER_RATIO = 0.15


@dataclass(frozen=True)
class WindowMessage:
    """A verbatim message as the policy sees it: its id and its exact token cost in the prompt."""

    id: int
    tokens: int


@dataclass(frozen=True)
class TurnInputs:
    budgets: Budgets
    verbatim_start_id: int | None  # None: from the first message of the window
    window: Sequence[WindowMessage]  # from the earliest message not covered, ascending
    applied_memory_tokens: int  # the memory block the prompt carries now
    landed_memory_tokens: int | None  # the memory block if landed work were applied; None: none
    landed_covered_through: int | None  # last message id the landed memory covers
    covered_through: int | None  # last message id stored memory or an open chapter job covers
    fold_in_flight: bool  # a chapter job is pending or running
    fixed_tokens: int = 0  # setup, picture and this turn's notes: never folded, always sent


@dataclass(frozen=True)
class TurnPlan:
    apply_landed: bool
    verbatim_start_id: int | None
    memory_tokens: int
    verbatim_tokens: int
    forced_cut_through: int | None  # the last message cut without a chapter (logged, shown)
    queue_range: tuple[int, int] | None  # (first, last) message ids of a new chapter job
    budgets: Budgets | None = None  # the budgets the plan used (fitted to the setup)
    landed_too_large: bool = False  # landed memory left unapplied: it does not fit (said)

    @property
    def history_tokens(self) -> int:
        return self.memory_tokens + self.verbatim_tokens


def _tokens_from(window: Sequence[WindowMessage], start_id: int | None) -> int:
    return sum(m.tokens for m in window if start_id is None or m.id >= start_id)


def effective_budgets(inputs: TurnInputs) -> Budgets:
    """The budgets fitted to the setup, so setup + history + reply always fit the window and
    the trigger keeps its gap below the ceiling (memory.budgets.Budgets.with_setup)."""
    return inputs.budgets.with_setup(inputs.fixed_tokens)


def plan_turn(inputs: TurnInputs) -> TurnPlan:
    budgets = effective_budgets(inputs)
    inputs = replace(inputs, budgets=budgets)
    window = list(inputs.window)
    start = inputs.verbatim_start_id
    memory = inputs.applied_memory_tokens
    landed = inputs.landed_memory_tokens
    newest = window[-1].tokens if window else 0
    # Landed memory too large to sit under the ceiling beside even the newest message is not
    # applied (it would overflow the window): it waits for a major fold to make it smaller.
    landed_too_large = landed is not None and landed + newest > budgets.ceiling
    apply_landed = landed is not None and not landed_too_large
    if apply_landed:
        assert landed is not None
        memory = landed
        covered = inputs.landed_covered_through
        after = next((m.id for m in window if covered is None or m.id > covered), None)
        if after is not None and (start is None or after > start):
            start = after

    verbatim = _tokens_from(window, start)
    forced_cut_through: int | None = None
    if memory + verbatim > budgets.ceiling and len(window) > 1:
        # Cut down to the settle level, never below the minimum verbatim (the scene stays
        # whole) unless the memory is so large that only less fits, never the newest message.
        target = min(max(budgets.settle - memory, budgets.min_verbatim), budgets.ceiling - memory)
        kept = 0
        new_start = window[-1].id
        for message in reversed(window):
            if start is not None and message.id < start:
                break
            if kept + message.tokens > target and message.id != window[-1].id:
                break
            kept += message.tokens
            new_start = message.id
        if start is None or new_start > start:
            forced_cut_through = max(m.id for m in window if m.id < new_start)
            start = new_start
            verbatim = _tokens_from(window, start)

    queue_range: tuple[int, int] | None = None
    history = memory + verbatim
    if history > budgets.trigger and not inputs.fold_in_flight and landed is None:
        queue_range = choose_fold_range(inputs, memory)
    return TurnPlan(
        apply_landed=apply_landed,
        verbatim_start_id=start,
        memory_tokens=memory,
        verbatim_tokens=verbatim,
        forced_cut_through=forced_cut_through,
        queue_range=queue_range,
        budgets=budgets,
        landed_too_large=landed_too_large,
    )


def choose_fold_range(inputs: TurnInputs, memory_tokens: int) -> tuple[int, int] | None:
    """Messages to fold so that history settles at the settle level after the chapter lands."""
    budgets = inputs.budgets
    covered = inputs.covered_through
    candidates = [m for m in inputs.window if covered is None or m.id > covered]
    if len(candidates) < 2:
        return None
    total = sum(m.tokens for m in candidates)
    # Solve keep + memory + growth(total - keep) = settle for the verbatim tokens to keep.
    growth = EXPECTED_CHAPTER_RATIO
    keep_target = (budgets.settle - memory_tokens - growth * total) / (1 - growth)
    keep_target = max(keep_target, budgets.min_verbatim)
    kept = 0
    first_kept_index = len(candidates)
    for index in range(len(candidates) - 1, 0, -1):
        if kept + candidates[index].tokens > keep_target:
            break
        kept += candidates[index].tokens
        first_kept_index = index
    if first_kept_index == len(candidates):
        first_kept_index = len(candidates) - 1  # always keep the newest message verbatim
    if first_kept_index <= 0:
        return None
    return candidates[0].id, candidates[first_kept_index - 1].id


def split_source(messages: Sequence[WindowMessage], max_tokens: int) -> list[tuple[int, int]]:
    """Cut a range into consecutive pieces of at most `max_tokens` (oldest first), as even as
    the messages allow: the fewest pieces that fit, each near their average, so a split never
    leaves a one-message remainder chapter beside a full one.

    A single message larger than the limit is a piece of its own: it is never cut here (the
    fold worker summarizes it on its own, in parts).
    """
    items = list(messages)
    pieces: list[tuple[int, int]] = []
    index = 0
    while index < len(items):
        if items[index].tokens > max_tokens:
            pieces.append((items[index].id, items[index].id))
            index += 1
            continue
        # The run of messages up to the next oversized one is split evenly.
        end = index
        while end < len(items) and items[end].tokens <= max_tokens:
            end += 1
        remaining = sum(m.tokens for m in items[index:end])
        while index < end:
            count = max(1, math.ceil(remaining / max(max_tokens, 1)))
            aim = remaining / count
            size = items[index].tokens
            last = index
            while last + 1 < end:
                following = items[last + 1].tokens
                # Take the next message while it fits and brings the piece nearer its aim.
                if size + following > max_tokens or size + following / 2 > aim:
                    break
                size += following
                last += 1
            pieces.append((items[index].id, items[last].id))
            remaining -= size
            index = last + 1
    return pieces


def major_gc_split(
    chapter_tokens: Sequence[int], threshold: int, min_chapters: int = 1, cap: int | None = None
) -> int:
    """How many of the oldest chapters fold into the synopsis (0: not yet).

    When the chapters together pass the threshold, the older half goes, but never fewer than
    `min_chapters` at once, and the newest chapter always stays: a major fold waits until it
    can take that many. At a small window the threshold is below one chapter's size; without
    the minimum the synopsis would be rewritten at nearly every chapter, which wears it away
    like a rolling summary. Past `cap` (the most the chapters may hold beside the synopsis and
    the minimum verbatim) the fold does not wait for company.
    """
    count = len(chapter_tokens)
    total = sum(chapter_tokens)
    if total <= threshold or count < 2:
        return 0
    if count < min_chapters + 1:
        return max(1, count // 2) if cap is not None and total > cap else 0
    return min(count - 1, max(count // 2, min_chapters))
