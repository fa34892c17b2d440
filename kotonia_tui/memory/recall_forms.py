"""The compact forms recall can quote an archived message in: whole, or its pieces that matter.

A message that answers a later question is often long, and the answer is a sentence of it. A
budget of a few hundred tokens carries one or two such messages whole, or a dozen as the pieces
that hold the query's words. So each message recall may quote has three forms:

- `whole`: the message as it was said;
- `short`: the fewest pieces that together hold every query term the message holds (a greedy
  cover, the pieces with the most weight first), in story order;
- `least`: the one piece that holds the most weight of them (a number or a name weighs
  `HEAVY`, any other word 1);
- `wide`: the short form with the piece after each of its pieces (a question's words are
  often in one sentence and its answer in the next: "I learned a song on the piano. It's the
  Interstellar theme.").

A piece is a sentence, or a part of one: at most `PIECE_WORDS` words, or `PIECE_CHARS`
characters of text written without spaces (Japanese, Chinese, Thai...). A long sentence is cut
into parts of even length. Pieces keep the message's own characters; where a form leaves text
out it says so with `GAP` (between pieces, at the start, at the end), so a quote is never
silently cut. A message that holds no query term (the reply recall brings with a hit) has its
first piece as `short` and `least`: a reply answers first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass

from kotonia_tui.sentences import sentence_ends
from kotonia_tui.terms import Searchable, Term, fold, is_number

PIECE_WORDS = 16
PIECE_CHARS = 48
HEAVY = 2  # the weight of a name or a number among the query's terms: they answer questions
GAP = "…"
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Compact:
    """A message's two compact forms (each the whole text when nothing is left out)."""

    short: str
    least: str
    wide: str

    def __iter__(self) -> Iterator[str]:
        return iter((self.short, self.least, self.wide))


def piece_spans(text: str) -> list[tuple[int, int]]:
    """Where `text`'s pieces are (start, end), in order, without the spaces between them."""
    spans: list[tuple[int, int]] = []
    start = 0
    for end in sentence_ends(text):
        spans.extend(_sentence_pieces(text, start, end))
        start = end
    return spans


def _sentence_pieces(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """One sentence's pieces: its words in runs of at most PIECE_WORDS (of even length), and a
    word longer than PIECE_CHARS (text without spaces) in parts of at most that many
    characters, each a piece of its own."""
    pieces: list[tuple[int, int]] = []
    run: list[tuple[int, int]] = []
    for word in _WORD.finditer(text, start, end):
        if len(word.group()) <= PIECE_CHARS:
            run.append(word.span())
            continue
        pieces.extend(_even_runs(run, PIECE_WORDS))
        run = []
        chars = [(i, i + 1) for i in range(word.start(), word.end())]
        pieces.extend(_even_runs(chars, PIECE_CHARS))
    pieces.extend(_even_runs(run, PIECE_WORDS))
    return pieces


def _even_runs(units: Sequence[tuple[int, int]], most: int) -> list[tuple[int, int]]:
    """`units` (spans) in consecutive runs of at most `most`, as even as they can be."""
    if not units:
        return []
    count = math.ceil(len(units) / most)
    size = math.ceil(len(units) / count)
    ends = [min(i + size, len(units)) - 1 for i in range(0, len(units), size)]
    return [(units[i * size][0], units[end][1]) for i, end in enumerate(ends)]


def compact(text: str, terms: Sequence[Term], heavy: Collection[str] = ()) -> Compact:
    """`text`'s short and least forms for the query `terms`; `heavy`: folded words that weigh
    HEAVY (the query's names)."""
    spans = piece_spans(text)
    if len(spans) <= 1:
        return Compact(text, text, text)
    held = [_held(text[a:b], terms) for a, b in spans]
    matched = set().union(*held)
    if not matched:
        first = _render(text, spans, [0])
        return Compact(first, first, _render(text, spans, _widened(spans, [0])))

    def weight(keys: Collection[str]) -> int:
        return sum(HEAVY if k in heavy or is_number(k) else 1 for k in keys)

    def length(i: int) -> int:
        return spans[i][1] - spans[i][0]

    best = max(range(len(spans)), key=lambda i: (weight(held[i]), -length(i), -i))
    chosen: list[int] = []
    uncovered = set(matched)
    while uncovered:
        i = max(
            range(len(spans)),
            key=lambda i: (weight(uncovered & held[i]), -length(i), -i),
        )
        chosen.append(i)
        uncovered -= held[i]
    return Compact(
        _render(text, spans, sorted(chosen)),
        _render(text, spans, [best]),
        _render(text, spans, _widened(spans, chosen)),
    )


def _widened(spans: Sequence[tuple[int, int]], chosen: Collection[int]) -> list[int]:
    """The chosen pieces and the piece after each, ascending."""
    return sorted({j for i in chosen for j in (i, i + 1) if j < len(spans)})


def _held(piece: str, terms: Sequence[Term]) -> set[str]:
    found = Searchable.of(piece)
    return {fold(term.text) for term in terms if found.holds(term)}


def _render(text: str, spans: Sequence[tuple[int, int]], chosen: Sequence[int]) -> str:
    """The chosen pieces (indices, ascending) as the message's own text, with GAP where
    pieces are left out; the whole text when none is."""
    if list(chosen) == list(range(len(spans))):
        return text
    parts: list[str] = []
    if chosen[0] > 0:
        parts.append(GAP)
    run_start = chosen[0]
    for k, i in enumerate(chosen):
        last = k == len(chosen) - 1
        if last or chosen[k + 1] != i + 1:
            parts.append(text[spans[run_start][0] : spans[i][1]])
            if not last:
                parts.append(GAP)
                run_start = chosen[k + 1]
    if chosen[-1] < len(spans) - 1:
        parts.append(GAP)
    return " ".join(parts)
