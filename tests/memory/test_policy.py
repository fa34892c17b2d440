"""The fold policy and the budgets (pure logic, no model)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from kotonia_tui.config import Settings
from kotonia_tui.memory.budgets import Budgets
from kotonia_tui.memory.policy import (
    TurnInputs,
    WindowMessage,
    effective_budgets,
    major_gc_split,
    plan_turn,
    split_source,
)


def budgets(n_ctx: int = 10_000, reply: int = 500, **settings: Any) -> Budgets:
    return Budgets.for_window(n_ctx, reply, Settings(**settings))


def window(count: int, tokens: int = 100, first_id: int = 1) -> list[WindowMessage]:
    return [WindowMessage(first_id + i, tokens) for i in range(count)]


def inputs(**values: Any) -> TurnInputs:
    base: dict[str, Any] = {
        "budgets": budgets(),
        "verbatim_start_id": None,
        "window": window(10),
        "applied_memory_tokens": 0,
        "landed_memory_tokens": None,
        "landed_covered_through": None,
        "covered_through": None,
        "fold_in_flight": False,
    }
    base.update(values)
    return TurnInputs(**base)


def test_budgets_are_fractions_of_the_window():
    b = budgets(65_536, 1024)
    assert b.trigger == int(65_536 * 0.47)
    assert b.ceiling == int(65_536 * 0.55)
    assert b.min_verbatim == int(65_536 * 0.16)
    assert b.major_gc == int(65_536 * 0.06)
    assert b.chapter_source == int(65_536 * 0.30)
    assert b.summary_max_tokens == 4096
    assert b.settle == b.trigger - b.headroom
    assert not b.wide


def test_wide_windows_keep_far_more_verbatim():
    narrow = budgets(65_536)
    wide = budgets(1_048_576)
    assert wide.wide
    assert wide.trigger / wide.n_ctx > 1.5 * narrow.trigger / narrow.n_ctx


def test_below_the_trigger_nothing_happens():
    plan = plan_turn(inputs(window=window(10)))  # 1,000 tokens of 4,700
    assert plan.queue_range is None
    assert plan.verbatim_start_id is None
    assert not plan.apply_landed
    assert plan.forced_cut_through is None


def test_crossing_the_trigger_queues_a_fold_and_changes_nothing_else():
    plan = plan_turn(inputs(window=window(48)))  # 4,800 > trigger 4,700
    assert plan.queue_range is not None
    first, last = plan.queue_range
    assert first == 1
    # The prompt itself is untouched on the crossing turn.
    assert plan.verbatim_start_id is None
    assert plan.verbatim_tokens == 4_800
    # What stays verbatim after the fold is at least the minimum.
    kept = 48 - last
    assert kept * 100 >= budgets().min_verbatim


def test_no_second_job_while_one_is_in_flight():
    plan = plan_turn(inputs(window=window(48), fold_in_flight=True))
    assert plan.queue_range is None


def test_landed_chapter_is_applied_and_verbatim_starts_after_it():
    plan = plan_turn(
        inputs(
            window=window(50),
            landed_memory_tokens=400,
            landed_covered_through=20,
            covered_through=20,
        )
    )
    assert plan.apply_landed
    assert plan.verbatim_start_id == 21
    assert plan.memory_tokens == 400
    assert plan.verbatim_tokens == 30 * 100
    # The applying turn queues nothing; the next turn decides with the new sizes.
    assert plan.queue_range is None


def test_after_a_fold_history_settles_near_trigger_minus_headroom():
    b = budgets()
    plan = plan_turn(inputs(window=window(48)))
    assert plan.queue_range is not None
    folded = plan.queue_range[1]
    chapter = int(folded * 100 * 0.15)  # a chapter of the expected size lands
    applied = plan_turn(
        inputs(
            window=window(49),
            landed_memory_tokens=chapter,
            landed_covered_through=folded,
            covered_through=folded,
        )
    )
    assert applied.history_tokens <= b.settle + 200  # one new message and rounding
    assert applied.verbatim_tokens >= b.min_verbatim


def test_past_the_ceiling_without_a_chapter_the_oldest_messages_leave_the_prompt():
    b = budgets()
    plan = plan_turn(inputs(window=window(60), fold_in_flight=True))  # 6,000 > ceiling 5,500
    assert plan.forced_cut_through is not None
    assert plan.verbatim_start_id == plan.forced_cut_through + 1
    # Cut down to the settle level, so the next turns do not cut again at once.
    assert plan.history_tokens <= max(b.settle, b.min_verbatim)
    assert plan.verbatim_tokens >= b.min_verbatim


def test_setup_size_lowers_the_ceiling_so_the_prompt_always_fits():
    b = budgets()
    plan = plan_turn(inputs(window=window(48), fixed_tokens=6_000, fold_in_flight=True))
    assert plan.history_tokens + 6_000 + b.reply_reserve <= b.n_ctx


def test_a_large_range_is_split_oldest_first_and_a_huge_message_is_never_cut():
    pieces = split_source(
        [WindowMessage(1, 40), WindowMessage(2, 40), WindowMessage(3, 500), WindowMessage(4, 10)],
        100,
    )
    assert pieces == [(1, 2), (3, 3), (4, 4)]


def test_major_gc_folds_the_older_half_once_the_chapters_pass_the_threshold():
    assert major_gc_split([100, 100, 100], 400) == 0
    assert major_gc_split([200, 200, 200, 200], 400) == 2
    assert major_gc_split([300, 300, 300], 400) == 1
    assert major_gc_split([900], 400) == 0  # one chapter alone waits for company


# ---- issue 14: small windows ----------------------------------------------------------------


@pytest.mark.parametrize("n_ctx", [1024, 2048, 4096, 8192, 65_536])
@pytest.mark.parametrize("setup_share", [0.0, 0.2, 0.35, 0.47, 0.6, 0.7])
def test_the_trigger_keeps_a_real_gap_below_the_ceiling_at_every_window_and_setup_size(
    n_ctx: int, setup_share: float
) -> None:
    """A 969-token setup at n_ctx 2048 made trigger = ceiling: every fold began as a forced
    cut. Whatever the setup takes, the trigger stays well below the ceiling."""
    reply = max(32, n_ctx // 8)
    fixed = int(n_ctx * setup_share)
    b = effective_budgets(inputs(budgets=budgets(n_ctx, reply), fixed_tokens=fixed))
    assert b.ceiling <= n_ctx - reply - fixed  # setup, history and reply fit the window
    assert b.ceiling - b.trigger >= 0.1 * b.ceiling  # a real gap: turns for the fold to land
    assert 0 < b.min_verbatim < b.trigger
    assert b.min_verbatim <= b.settle < b.trigger  # a fold frees room, not nothing


def test_a_setup_that_squeezes_the_story_shrinks_every_budget_by_the_same_factor() -> None:
    window = budgets(2048, 256)
    fitted = window.with_setup(969)
    assert fitted.squeezed and not window.squeezed
    assert fitted.ceiling == 2048 - 256 - 969 - 16
    for name in ("trigger", "min_verbatim", "headroom", "major_gc"):
        assert getattr(fitted, name) == int(getattr(window, name) * fitted.scale), name
    note = fitted.room_note("Rowan Ashby")
    assert note.startswith("Rowan Ashby's setup leaves too little room: it takes 969 tokens")
    assert f"fold at {fitted.trigger}" in note and f"ceiling {fitted.ceiling}" in note
    assert window.with_setup(100).room_note("Wren") == ""  # room enough: nothing to say


def test_a_forced_cut_never_overflows_when_the_memory_is_large() -> None:
    b = budgets()
    plan = plan_turn(inputs(window=window(60), applied_memory_tokens=5_000, fold_in_flight=True))
    # Less than the minimum verbatim is kept, so that the prompt still fits under the ceiling.
    assert plan.history_tokens <= b.ceiling
    assert 100 <= plan.verbatim_tokens < b.min_verbatim


def test_landed_memory_too_large_for_the_window_is_not_applied() -> None:
    plan = plan_turn(
        inputs(
            window=window(10),
            landed_memory_tokens=6_000,
            landed_covered_through=5,
            covered_through=5,
        )
    )
    assert not plan.apply_landed and plan.landed_too_large
    assert plan.memory_tokens == 0


def test_a_split_is_balanced_and_leaves_no_one_message_remainder() -> None:
    """Greedy cutting made 10 messages and then #11 alone: a one-message chapter."""
    pieces = split_source(window(11, tokens=60), 600)
    assert len(pieces) == 2
    sizes = [last - first + 1 for first, last in pieces]
    assert min(sizes) >= 5 and abs(sizes[0] - sizes[1]) <= 1
    assert pieces[0][0] == 1 and pieces[-1][1] == 11
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(pieces))
    # Uneven messages: each piece within the limit, and no two neighbours that would fit as one.
    messages = [WindowMessage(i, t) for i, t in enumerate([90, 10, 10, 80, 20, 70, 5, 5, 95], 1)]
    sizes = [
        sum(m.tokens for m in messages if first <= m.id <= last)
        for first, last in split_source(messages, 150)
    ]
    assert sum(sizes) == 385 and max(sizes) <= 150
    assert all(a + b > 150 for a, b in itertools.pairwise(sizes))


def test_a_major_fold_waits_until_it_can_take_the_minimum_number_of_chapters() -> None:
    """At n_ctx 2048 the 6% threshold (122 tokens) is below one chapter: with the older half
    of two chapters folded each time, the synopsis was rewritten at nearly every chapter."""
    assert major_gc_split([80, 80], 122, min_chapters=3) == 0
    assert major_gc_split([80, 80, 80], 122, min_chapters=3) == 0
    assert major_gc_split([80, 80, 80, 80], 122, min_chapters=3) == 3
    assert major_gc_split([80] * 8, 122, min_chapters=3) == 4  # the older half, when more
    # Chapters past the memory's room fold without waiting for company.
    assert major_gc_split([400, 400], 122, min_chapters=3, cap=600) == 1


def test_recall_takes_the_room_under_the_trigger_up_to_its_share_again() -> None:
    fitted = budgets(recall_max_tokens=0)
    share = fitted.recall
    assert fitted.recall_with_room(share, fitted.trigger) == share  # at the trigger: none
    assert fitted.recall_with_room(share, fitted.ceiling) == share  # past it: none
    after_fold = fitted.settle  # the history right after a fold
    assert fitted.recall_with_room(share, after_fold) == share + fitted.headroom
    assert fitted.recall_with_room(share, 0) == 2 * share  # never more than its share again
    assert fitted.recall_with_room(0, 0) == 0  # recall off stays off


def test_recall_max_tokens_bounds_a_turn_s_recall_room_included_however_wide_the_window() -> None:
    """Recalled lines are read again every turn; a wide window's share would have a turn
    read thousands of them, where what a question needs does not grow with the window."""
    wide = budgets(n_ctx=65_536, recall_max_tokens=1_000)
    assert wide.recall == 1_000  # 20% would be 13,107
    assert wide.recall_with_room(wide.recall, 0) == 1_000  # the room does not add to it
    narrow = budgets(n_ctx=2_048, recall_max_tokens=600)
    share = int(2_048 * Settings().recall_budget_ratio)
    assert narrow.recall == share == 409  # under the cap the share decides
    assert narrow.recall_with_room(share, 0) == 600  # share and room (409 more), up to the cap
    assert narrow.recall_with_room(share, narrow.trigger) == share
    uncapped = budgets(n_ctx=65_536, recall_max_tokens=0)
    assert uncapped.recall == int(65_536 * Settings().recall_budget_ratio)
    assert budgets(recall_budget_ratio=0.0, recall_max_tokens=1_000).recall_with_room(0, 0) == 0
