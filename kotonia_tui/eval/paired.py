"""Two arms over the same questions: where one answered right and the other did not.

Two arms' mean recall differ by a question or two between seeds, and a small reader guesses
right now and then with no evidence in front of it: a difference of means alone cannot say
whether one arm is better. Both arms answer the same questions in a run, so they are compared
question by question, pooled over every run: how many questions only the one got right, how
many only the other, and the exact two-sided sign test of that split (the chance of a split at
least as uneven if neither arm were better). The questions both got right, or both wrong, say
nothing about which is better and are only counted. The same is done for the evidence: where
only one arm's prompt held an evidence message.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from kotonia_tui.eval.evidence import PRESENT
from kotonia_tui.eval.results import ArmStatus, GradedAnswer, PairedCount, RunResult, Split

# The comparisons the questions are about: memory against forgetting, with and without
# recall, and the best memory arms against the whole conversation in the window.
PAIRS = (
    ("generational", "truncation"),
    ("rolling", "truncation"),
    ("generational+recall", "truncation+recall"),
    ("generational+recall", "generational"),
    ("truncation+recall", "truncation"),
    ("generational+recall", "full"),
    ("truncation+recall", "full"),
)
# The places where an evidence message is in front of the reader (eval/evidence.py).
PRESENT_PLACES = frozenset(place.value for place in PRESENT)


def sign_test(here: int, there: int) -> float:
    """The exact two-sided sign test: the chance that `here + there` fair coin tosses split at
    least as unevenly as `here` to `there`."""
    n = here + there
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(here, there) + 1)) / float(2**n)
    return min(1.0, 2 * tail)


def _split(pairs: Iterable[tuple[bool, bool]]) -> Split:
    here = there = 0
    for mine, theirs in pairs:
        here += mine and not theirs
        there += theirs and not mine
    return Split(here, there, round(sign_test(here, there), 4))


# One question in one arm: answered right (None: not asked) and with evidence in the prompt.
Outcome = tuple[bool | None, bool]


def outcome(answer: GradedAnswer) -> Outcome:
    return answer.correct, any(place in PRESENT_PLACES for f in answer.found for place in f.where)


def compare(arm: str, against: str, matched: Sequence[tuple[Outcome, Outcome]]) -> PairedCount:
    """`arm` against `against` over `matched`: each question's outcome in both."""
    graded = all(a[0] is not None and b[0] is not None for a, b in matched)
    return PairedCount(
        arm,
        against,
        len(matched),
        _split((bool(a[0]), bool(b[0])) for a, b in matched) if graded else None,
        _split((a[1], b[1]) for a, b in matched),
    )


def paired_counts(
    runs: Sequence[RunResult],
    arms: Sequence[str],
    pairs: Sequence[tuple[str, str]] = PAIRS,
) -> list[PairedCount]:
    """Each of `pairs` whose two arms both ran, over the questions both answered in the same
    run (matched by question id)."""
    counts: list[PairedCount] = []
    for arm, against in pairs:
        if arm not in arms or against not in arms:
            continue
        matched: list[tuple[Outcome, Outcome]] = []
        for run in runs:
            mine, theirs = run.arms.get(arm), run.arms.get(against)
            if mine is None or theirs is None:
                continue
            if mine.status is not ArmStatus.OK or theirs.status is not ArmStatus.OK:
                continue
            other = {answer.id: outcome(answer) for answer in theirs.questions}
            matched += [(outcome(a), other[a.id]) for a in mine.questions if a.id in other]
        if matched:
            counts.append(compare(arm, against, matched))
    return counts
