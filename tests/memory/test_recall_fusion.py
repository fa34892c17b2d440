"""Semantic recall's pure part (memory/recall.py): the two rankings fused by reciprocal rank,
and what the inspector says about why each excerpt came."""

from __future__ import annotations

import pytest

from kotonia_tui.domain import Role
from kotonia_tui.memory.recall import (
    RECALL_HEADER,
    RECALL_HEADER_SEMANTIC,
    RRF_K,
    ArchivedLine,
    Candidate,
    fuse,
    select,
    why,
)
from kotonia_tui.terms import recall_terms


def line(number: int, text: str) -> ArchivedLine:
    return ArchivedLine(100 + number, number, Role.USER, "Ann", text, 10)


def test_a_message_both_rankings_found_comes_first() -> None:
    fused = fuse([1, 2, 3], [4, 3, 5])
    # 3 is third by words and second by meaning: above 1, first by words alone.
    assert [i for i, _ in fused] == [3, 1, 4, 2, 5]
    assert dict(fused)[3] == pytest.approx(1 / (RRF_K + 3) + 1 / (RRF_K + 2))
    assert dict(fused)[1] == pytest.approx(1 / (RRF_K + 1))


def test_equal_scores_prefer_words_then_the_newer_message() -> None:
    # 1 and 4 both rank first in one list: words win the tie; 2 and 5 likewise.
    assert [i for i, _ in fuse([1, 2], [4, 5])] == [1, 4, 2, 5]
    assert [i for i, _ in fuse([], [7, 9])] == [7, 9]
    assert [i for i, _ in fuse([7, 9], [])] == [7, 9]  # words alone: BM25's order kept


def test_the_one_best_hit_by_words_comes_second_at_worst() -> None:
    # 9 holds more of the query than any other line by words (first), but meaning found the
    # lines sharing its topic word and not it: fused alone it falls to fifth.
    by_words, by_meaning = [9, 1, 2, 3, 4], [1, 2, 3, 4, 5]
    assert [i for i, _ in fuse(by_words, by_meaning)] == [1, 2, 3, 4, 9, 5]
    led = fuse(by_words, by_meaning, lead=9)
    assert [i for i, _ in led] == [1, 9, 2, 3, 4, 5]  # the fused best keeps its place
    assert dict(led)[9] == pytest.approx(1 / (RRF_K + 1))  # its score is its own
    # Already first or second, or not found at all: nothing moves.
    assert fuse([1, 2], [1, 2], lead=1) == fuse([1, 2], [1, 2])
    assert fuse([2, 1], [1, 2], lead=2) == fuse([2, 1], [1, 2])
    assert fuse([1, 2], [1, 2], lead=7) == fuse([1, 2], [1, 2])


def test_why_says_words_meaning_or_both() -> None:
    assert why(("ilse", "bees"), None, None) == "on 'ilse', 'bees'"  # as before semantic recall
    assert why((), 0.913, 0.0164) == "similar meaning (0.91) · score 0.016"
    assert why(("bees",), 0.5, 0.0325) == "on 'bees' and similar meaning (0.50) · score 0.033"
    assert why(("bees",), None, 0.0164) == "on 'bees' · score 0.016"


def test_the_header_says_meaning_only_when_vectors_took_part() -> None:
    hit = line(5, "Grandmother kept beehives.")
    candidates = [Candidate(hit, None, None, similarity=0.97, score=0.016)]
    terms = recall_terms("beekeeping grandma")

    def choose(candidates: list[Candidate], semantic: bool = False):
        return select(
            candidates,
            terms,
            memory_text="",
            budget=500,
            header_tokens=20,
            marker_tokens=5,
            semantic=semantic,
        )

    semantic = choose(candidates, semantic=True)
    assert semantic.render().startswith(RECALL_HEADER_SEMANTIC)
    (excerpt,) = semantic.excerpts
    assert (excerpt.words, excerpt.similarity, excerpt.score) == ((), 0.97, 0.016)
    plain = choose([Candidate(hit, None, None)])
    assert plain.render().startswith(RECALL_HEADER) and not plain.semantic
