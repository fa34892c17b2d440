"""Where a search's terms occur in a text: the highlighted spans and snippets of search results.

The terms and what they match are the term module's (kotonia_tui/terms.py), the rules the
full-text index follows, so that what is found and what is highlighted agree: a term of a
script written without spaces is found anywhere ("unspaced"), any other term at the start of a
word ("light" in "lighthouse", not in "delight"), ignoring case and Latin accents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kotonia_tui.terms import Term, fold_char, is_spaced_word_char


def term_spans(text: str, terms: Sequence[Term]) -> list[tuple[int, int]]:
    """Where the terms occur in `text` (start, end), sorted and merged: what a result
    highlights. A spaced term counts only at the start of a word, as the index matches it."""
    folded = _fold(text)
    spans: list[tuple[int, int]] = []
    for term in terms:
        needle = _fold(term.text)
        start = folded.find(needle) if needle else -1
        while start != -1:
            at_word_start = start == 0 or not is_spaced_word_char(folded[start - 1])
            if term.unspaced or at_word_start:
                spans.append((start, start + len(needle)))
            start = folded.find(needle, start + 1)
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _fold(text: str) -> str:
    """`text` folded one character for one (a match's place in the folded text is its place in
    the text), as the index compares ("cafe" finds "café")."""
    return "".join(fold_char(char) for char in text)


@dataclass(frozen=True)
class Snippet:
    """A piece of a message around its first match, with the matches inside it."""

    text: str
    spans: tuple[tuple[int, int], ...]  # into `text`
    cut_before: bool
    cut_after: bool


def snippet(text: str, terms: Sequence[Term], width: int = 120) -> Snippet:
    """Up to `width` characters of `text` around its first match, on one line."""
    flat = " ".join(text.split())
    spans = term_spans(flat, terms)
    first = spans[0][0] if spans else 0
    start = max(0, min(first - width // 3, len(flat) - width))
    if start > 0:
        # Start at a word when one begins close by, not in the middle of one.
        space = flat.find(" ", start, first)
        if space != -1 and space - start < width // 6:
            start = space + 1
    end = min(len(flat), start + width)
    inside = tuple(
        (max(s, start) - start, min(e, end) - start) for s, e in spans if e > start and s < end
    )
    return Snippet(flat[start:end], inside, start > 0, end < len(flat))
