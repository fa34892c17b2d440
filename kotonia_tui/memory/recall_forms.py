"""The compact forms recall can quote an archived message in: whole, or its pieces that matter.

A message that answers a later question is often long, and the answer is a sentence of it. A
budget of a few hundred tokens carries one or two such messages whole, or a dozen as the pieces
that hold the query's words. So each message recall may quote has three forms:

- `whole`: the message as it was said;
- `short`: the sentences of the fewest pieces that together hold every query term the message
  holds (a greedy cover, the pieces with the most weight first), in story order;
- `least`: the sentence of the one piece that holds the most weight of them (a word weighs its
  rarity in the archive, a number or a name `HEAVY` times that);
- `wide`: the short form with the piece before and the piece after each of its sentences (a
  question's words are often in one sentence and its answer in the next or the one before:
  "I learned a song on the piano. It's the Interstellar theme.").

A piece is a sentence, or a part of one: at most `PIECE_WORDS` words, or `PIECE_CHARS`
characters of text written without spaces (Japanese, Chinese, Thai...). A long sentence is cut
into parts of even length. A form quotes a chosen piece with the rest of its sentence (the
words that answer often sit in the same sentence as the query's, past a 16-word cut: "I went
to a meeting of the club (I went for the free cookies)"), at most `SENTENCE_PIECES` pieces:
a longer sentence gives the piece and the parts beside it. Pieces keep the message's own
characters; where a form leaves text out it says so with `GAP` (between pieces, at the start,
at the end), so a quote is never silently cut. A message that holds no query term (the reply
recall brings with a hit) has its first sentence as `short` and `least`: a reply answers first.
So a message that replies to a question (`asks`: the message before it, said by someone else,
ends by asking) keeps its opening in its `short` and `wide` forms, whatever query words it
holds further on.
(Measured, issue 28: quoting the 16-word piece alone, the quote held the evidence message but
not the answer's words for 14 of chitchat's 63 questions at 20% of n_ctx.)
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

from kotonia_tui.sentences import sentence_ends
from kotonia_tui.terms import Searchable, Term, fold, is_number

PIECE_WORDS = 16
PIECE_CHARS = 48
SENTENCE_PIECES = 3  # a chosen piece is quoted with its sentence up to this many pieces
HEAVY = 2  # the weight of a name or a number among the query's terms: they answer questions
GAP = "…"
QUESTION_MARKS = ("?", "？")
# Narration and thoughts at a message's end: *action*, _action_, (aside), `thought`.
_TRAILING_NARRATION = re.compile(r"(?:\s*(?:\*[^*\n]*\*|_[^_\n]*_|\([^()\n]*\)|`[^`\n]*`))+\s*$")
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
    return [span for span, _sentence in _pieces(text)]


def _pieces(text: str) -> list[tuple[tuple[int, int], int]]:
    """`text`'s pieces, each with the number of the sentence it is part of."""
    pieces: list[tuple[tuple[int, int], int]] = []
    start = 0
    for number, end in enumerate(sentence_ends(text)):
        pieces.extend((span, number) for span in _sentence_pieces(text, start, end))
        start = end
    return pieces


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


def compact(
    text: str,
    terms: Sequence[Term],
    heavy: Collection[str] = (),
    rarity: Mapping[str, float] | None = None,
    *,
    answers: bool = False,
) -> Compact:
    """`text`'s short and least forms for the query `terms`; `heavy`: folded words that weigh
    HEAVY (the query's names); `rarity`: each folded term's rarity in the archive (inverse
    document frequency), by which a term weighs (a term it does not name weighs as the
    rarest: the pairs of characters of unspaced text). `answers`: the message replies to a
    question (`asks`), so its short and wide forms keep its opening (`_opening`)."""
    pieces = _pieces(text)
    spans = [span for span, _sentence in pieces]
    if len(spans) <= 1:
        return Compact(text, text, text)
    sentence = [number for _span, number in pieces]
    held = [_held(text[a:b], terms) for a, b in spans]
    matched = set().union(*held)
    opening = _opening(text, spans) if answers else []

    def forms(chosen: Collection[int], best: int) -> Compact:
        short = sorted({*_with_sentences(sentence, chosen), *opening})
        return Compact(
            _render(text, spans, short),
            _render(text, spans, _with_sentences(sentence, [best])),
            _render(text, spans, _widened(text, spans, short)),
        )

    if not matched:
        return forms([0], 0)

    def weight(keys: Collection[str]) -> float:
        return term_weight(keys, heavy, rarity)

    # Each piece is judged as it is quoted: with the rest of its sentence (its unit), so the
    # sentence that holds the most weight wins, the shorter on a tie ("Taylor and I went to
    # Vegas once and we got canes." over a fragment of a longer one holding the same words).
    units = [_with_sentences(sentence, [i]) for i in range(len(spans))]
    unit_held = [set().union(*(held[j] for j in unit)) for unit in units]

    def length(i: int) -> int:
        return spans[units[i][-1]][1] - spans[units[i][0]][0]

    best = max(range(len(spans)), key=lambda i: (weight(unit_held[i]), -length(i), -i))
    chosen: list[int] = []
    uncovered = set(matched)
    while uncovered:
        i = max(
            range(len(spans)),
            key=lambda i: (weight(uncovered & unit_held[i]), -length(i), -i),
        )
        chosen.append(i)
        uncovered -= unit_held[i]
    return forms(chosen, best)


def term_weight(
    keys: Collection[str], heavy: Collection[str] = (), rarity: Mapping[str, float] | None = None
) -> float:
    """What folded query terms weigh together: each its rarity in the archive (a term
    `rarity` does not name weighs as the rarest), a name (`heavy`) or a number HEAVY times."""
    rare = rarity or {}
    rarest = max(rare.values(), default=1.0)
    # fsum: `keys` may be a set, whose order (the hash seed's) would move the last bits.
    return math.fsum(
        rare.get(k, rarest) * (HEAVY if k in heavy or is_number(k) else 1) for k in keys
    )


def _with_sentences(sentence: Sequence[int], chosen: Collection[int]) -> list[int]:
    """The chosen pieces with the rest of their sentence, ascending: the whole sentence when
    it has at most SENTENCE_PIECES pieces, else the piece and those beside it within it.
    (`sentence`: each piece's sentence number, ascending.)"""
    out: set[int] = set()
    for i in chosen:
        first, last = i, i
        while first > 0 and sentence[first - 1] == sentence[i]:
            first -= 1
        while last + 1 < len(sentence) and sentence[last + 1] == sentence[i]:
            last += 1
        if last - first + 1 <= SENTENCE_PIECES:
            out.update(range(first, last + 1))
        else:
            out.update(range(max(first, i - 1), min(last, i + 1) + 1))
    return sorted(out)


def asks(text: str) -> bool:
    """Whether `text` ends by asking something (its last sentence holds a question mark): the
    reply to it answers first. (Measured, issue 28: "when do you graduate from byu?" was
    answered "Nice! Those sound like fun classes! Well, I graduate in April." and "Which gym do
    you go to?" by "yeah just the smith fieldhouse", each followed by lines that held more of
    the question's words, which the compact forms quoted instead.)"""
    # Role-play ends a line with what is done, not said: "Where are you going? *tilts her
    # head*" asks all the same.
    stripped = _TRAILING_NARRATION.sub("", text).rstrip()
    if not stripped:
        return False
    ends = sentence_ends(stripped)
    start = ends[-2] if len(ends) > 1 else 0
    return any(mark in stripped[start:] for mark in QUESTION_MARKS)


def _opening(text: str, spans: Sequence[tuple[int, int]]) -> list[int]:
    """The first pieces, until they hold PIECE_WORDS words (or the message ends): where a
    reply answers the question before it, whatever else it goes on to say."""
    return _walk(text, spans, 0, 1)


def _widened(text: str, spans: Sequence[tuple[int, int]], chosen: Collection[int]) -> list[int]:
    """The chosen pieces and, beside each run of them, the pieces before and after it until
    each side holds PIECE_WORDS words (or the message ends): a run of short lines ("Wiche",
    "Not witches haha") gives as much context as one long sentence. (Measured, issue 28: one
    piece each side left the answer out of chitchat's multi-line messages more often.)"""
    out = set(chosen)
    for i in chosen:
        if i - 1 not in chosen:
            out.update(_walk(text, spans, i - 1, -1))
        if i + 1 not in chosen:
            out.update(_walk(text, spans, i + 1, 1))
    return sorted(out)


def _walk(text: str, spans: Sequence[tuple[int, int]], start: int, step: int) -> list[int]:
    """The pieces from `start` on, a `step` at a time, until they hold PIECE_WORDS words (or
    the message ends)."""
    out: list[int] = []
    k, taken = start, 0
    while 0 <= k < len(spans) and taken < PIECE_WORDS:
        out.append(k)
        a, b = spans[k]
        taken += max(1, len(_WORD.findall(text, a, b)))
        k += step
    return out


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
