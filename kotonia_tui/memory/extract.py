"""A chapter quoted from a range's own lines, for when the chronicler's answer cannot be stored.

A small model sometimes cannot write a usable chapter for a range: it loops until its output
cap, refuses twice, or writes nothing. Asking again later gives the same answer (the chronicler
is greedy), and a range with no chapter is a hole: once the window moves past it, it is in
neither the prompt nor the memory. So the fold stores an extract instead, marked as one: the
range's sentences that say most per character (words the rest of the range does not repeat,
names and numbers above all, the user's own statements a little more; `_Worth`), quoted in
their order with the speaker and message id, and " … " where sentences were left out. A major
fold whose synopsis cannot be stored (or whose draft keeps almost nothing of them: `kept_share`)
quotes its chapters the same way (`extract_passages`). Pure and deterministic: the same input
and limit give the same bytes.
"""

from __future__ import annotations

import heapq
import itertools
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from kotonia_tui import terms
from kotonia_tui.domain import Chapter, Message, Role
from kotonia_tui.memory.budgets import LENGTH_TOLERANCE
from kotonia_tui.sentences import sentences
from kotonia_tui.story_dates import told_time

ELISION = " … "
# What a memory text cites: a quoted line's label ("#12 Mara: ", "#33-#51: ", with the in-story
# time of its chapter "#33-#51, Wednesday, 31 October 2018: ") or a message id ("(#3 #4)"). A
# reference, not the story: no fact's number, no name in a sentence. A time may hold a colon
# ("at 10:30") but never ": " (`label_time` writes it so), so a label ends at its first ": ".
_TIME = r"(?:[^:\n]|:(?! )){1,100}"
_LABEL = rf"#\d+(?:-#\d+)?(?: [^:\n]{{1,60}}|, {_TIME})?: "
_REFERENCE = re.compile(f"{_LABEL}|#\\d+")
_LEADING_LABEL = re.compile(f"^{_LABEL}")
# Who speaks, with no id: "Mara: " (a draft writes its lines so, a chat line's name). Before
# nothing, it says who and not what: "Mara: …" alone took a tight quote's room for a name.
_SPEAKER = re.compile(r"^[^\W\d_][^\W_]*(?: [^\W\d_][^\W_]*){0,3}: ")
# What a sentence's words weigh (`_Worth`): a name or a number against a plain word, a word
# the extract already quotes against a new one, the user's sentences against the others'.
SPECIFIC = 2.0
REPEATED = 0.25
BY_USER = 1.5
# Every pair of characters of a script without spaces is a term (terms.recall_terms): a
# two-character word is about one of them and the pairs across its ends, so a pair weighs
# a share of a word, or Japanese would outweigh English three to one per character.
PAIR = 0.35
EMPTY_WORTH = 1e-3  # a sentence with no word of substance: chosen only where room is left
# A summary is thin when it keeps less than this share of what a quote of its sources the same
# size keeps (`kept_share`). Measured, issue 28, on the embedded 270M chronicler at n_ctx 2048:
# its synopses "So far in the story, the chronicler is not saying anything." and "... you have
# been able to tell the story of Mara and Corwin." were stored and replaced every line of the
# story before them; its chapters kept 0.06-0.8 of their quote's worth (median about 0.4). A
# third, not all: a summary also says who did what and what was only claimed, which a count of
# words misses ("Ann visited Wren at the lighthouse and they talked about the storm lamps."
# keeps about half of its quote's worth, and is a fair summary).
THIN_SHARE = 0.3


@dataclass(frozen=True)
class Passage:
    """A text to quote from, under the label its quoted line begins with ("#12 Mara")."""

    label: str
    text: str
    by_user: bool = False  # the user's own words: quoted before the same sentence of others
    # When it happened in the story (a chapter's in-story time, as `label_time` writes it):
    # said after the label, once for a run of quoted lines with the same time.
    time: str | None = None


@dataclass(frozen=True)
class _Sentence:
    message: int  # position of its passage
    index: int  # position in its message
    text: str
    by_user: bool
    last: int  # the last position it covers (the ids it cites may follow it)


def without_references(text: str) -> str:
    """`text` without the labels and message ids a memory text cites."""
    return _REFERENCE.sub(" ", text)


def _says_something(text: str) -> bool:
    """A sentence with a word or a number besides what it cites and who speaks: "…", "(#3)",
    "#42 Ann: …" or "Ann: …" alone, the pieces of a quote quoted again or a draft's empty
    line, would fill a tight extract with nothing."""
    return bool(terms.tokens(_SPEAKER.sub("", without_references(text).strip(), count=1)))


def _quotable(texts: Sequence[str]) -> list[tuple[int, int, str]]:
    """The sentences that say something, by their index. A quote quoted again splits "#44 Rowan:
    … Hello there." into a label alone and its sentence: the sentence keeps the label, so what
    it quotes still says who said it. The ids an item cites ("- Mara met Soot. (#34)") stay
    with the sentence before them."""
    kept: list[tuple[int, int, str]] = []  # (first position, last position, text)
    label, label_at = "", 0
    for index, text in enumerate(texts):
        if not _says_something(text):
            found = _LEADING_LABEL.match(text) or _SPEAKER.match(text.strip())
            if found:
                label, label_at = found.group(0), index
            elif kept and kept[-1][1] == index - 1 and _REFERENCE.search(text):
                first, _last, before = kept[-1]
                kept[-1] = (first, index, f"{before} {text}")
            continue
        first = index
        if label and not _LEADING_LABEL.match(text):
            text, first = f"{label}… {text}", label_at  # the label's line is quoted with it
        kept.append((first, index, text))
        label = ""
    return kept


def _keys(text: str) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """A sentence's words of substance (folded; its labels and ids left out), which of them
    are names or numbers, and which are pairs of characters of a script without spaces."""
    text = without_references(text)
    found = terms.substance(text)
    words = frozenset(terms.fold(t.text) for t in found)
    named = {terms.fold(word) for _at, name in terms.names(text) for word in terms.tokens(name)}
    return (
        words,
        frozenset(w for w in words if w in named or terms.is_number(w)),
        frozenset(terms.fold(t.text) for t in found if t.unspaced),
    )


class _Worth:
    """What quoting a sentence adds, given what the sentences chosen before it hold.

    Each word of substance weighs its rarity among the sentences quoted from (a word most of
    them repeat, a name said in every line, tells the reader little), a name or a number
    SPECIFIC times (what later questions ask for: who, where, when, how many), and a word the
    extract already holds REPEATED of that (said once, it is there); the user's own sentences
    weigh BY_USER more (what users say about themselves is what a summary most often drops)."""

    def __init__(self, candidates: Sequence[_Sentence]) -> None:
        self.keys = [_keys(c.text) for c in candidates]
        count = len(candidates)
        held: dict[str, int] = {}
        for words, _specific, _pairs in self.keys:
            for word in words:
                held[word] = held.get(word, 0) + 1
        specific = {w for keys in self.keys for w in keys[1]}
        self.pairs = {w for keys in self.keys for w in keys[2]}
        # What each word weighs, said for the first time.
        self.weight = {
            w: math.log(1 + count / n)
            * (SPECIFIC if w in specific else 1.0)
            * (PAIR if w in self.pairs else 1.0)
            for w, n in held.items()
        }
        self.quoted: set[str] = set()

    def of(self, position: int, by_user: bool) -> float:
        # fsum: a sum of floats over a set depends on its order, which the hash seed decides;
        # the extract then broke ties differently from one process to the next.
        worth = math.fsum(
            self.weight[w] * (REPEATED if w in self.quoted else 1.0) for w in self.keys[position][0]
        )
        return worth * (BY_USER if by_user else 1.0)

    def take(self, position: int) -> None:
        self.quoted.update(self.keys[position][0])

    def held(self, text: str) -> float:
        """What of the sentences' words `text` holds (in any of their forms, `same_stem`), each
        weighing as it would quoted first."""
        found = terms.Searchable.of(without_references(text))
        return math.fsum(
            weight
            for word, weight in self.weight.items()
            if found.holds(terms.Term(word, word in self.pairs))
        )


def message_passages(messages: Sequence[Message]) -> list[Passage]:
    """The story's messages as passages, "#id speaker" (imported notes are not the story)."""
    return [
        Passage(f"#{m.id} {m.speaker}", m.text, m.role is Role.USER)
        for m in messages
        if m.role is not Role.SYSTEM
    ]


def _candidates(story: Sequence[Passage], split: Sequence[Sequence[str]]) -> list[_Sentence]:
    """The sentences of `story` an extract may quote (`split`: each passage's sentences)."""
    return [
        _Sentence(position, index, text, p.by_user, last)
        for position, (p, texts) in enumerate(zip(story, split, strict=True))
        for index, last, text in _quotable(texts)
    ]


def kept_share(text: str, passages: Sequence[Passage], room_chars: int = 0) -> float:
    """What of `passages` `text` keeps against what a quote of them as long as `text` keeps
    (`extract_passages`), or as long as `room_chars` when that is longer (the room a summary
    was given: a short one is held against what its room would quote), as the extract weighs
    words (`_Worth`: their rare words, names and numbers; in any of their forms): 1.0 or more
    when `text` keeps as much, and 1.0 when the quote keeps nothing. A summary far under
    THIN_SHARE keeps almost nothing of what it replaces."""
    story = [p for p in passages if p.text.strip()]
    split = [sentences(p.text) for p in story]
    candidates = _candidates(story, split)
    if not candidates:
        return 1.0
    worth = _Worth(candidates)  # one weighing for the quote and the text it is held against
    limit = max(len(text), room_chars)
    quoted = worth.held(_extract(story, split, candidates, worth, limit))
    return worth.held(text) / quoted if quoted > 0 else 1.0


def extract_passages(passages: Sequence[Passage], limit_chars: int) -> str:
    """The passages quoted in at most about `limit_chars` characters: one line per passage
    with a chosen sentence, "label: sentence … sentence" (for messages, "#id speaker: ...").
    At least one sentence is quoted; one longer than the limit on its own is shortened at a
    word (inside a word when one word is already too long: a pasted run with no space), and
    says it is an extract of the passage the label names."""
    story = [p for p in passages if p.text.strip()]
    split = [sentences(p.text) for p in story]
    candidates = _candidates(story, split)
    if not candidates:
        return ""
    return _extract(story, split, candidates, _Worth(candidates), limit_chars)


def _extract(
    story: Sequence[Passage],
    split: Sequence[Sequence[str]],
    candidates: Sequence[_Sentence],
    worth: _Worth,
    limit_chars: int,
) -> str:
    """`extract_passages` for the story's sentences (`candidates`, not empty), weighed by
    `worth` (its quoted words are taken as the sentences are chosen)."""
    chosen = _choose(candidates, worth, limit_chars)
    if not chosen:
        # Not even one sentence fits: the one worth most (the earliest of equals), shortened.
        best = candidates[
            max(range(len(candidates)), key=lambda i: (worth.of(i, candidates[i].by_user), -i))
        ]
        short = _shorten(best.text, limit_chars, story[best.message].label)
        chosen = [replace(best, text=short)]
    counts = [len(texts) for texts in split]
    lines = []
    shown: str | None = None  # the time the lines quoted so far are under
    for position, passage in enumerate(story):
        mine = sorted((s for s in chosen if s.message == position), key=lambda s: s.index)
        if not mine:
            continue
        parts = ["… " if mine[0].index > 0 else "", mine[0].text]
        for previous, sentence in itertools.pairwise(mine):
            parts += [ELISION if sentence.index > previous.last + 1 else " ", sentence.text]
        if mine[-1].last < counts[position] - 1:
            parts.append(" …")
        label = passage.label
        if passage.time and passage.time != shown:
            # Once for a run of lines with the same time (a line without one is read back
            # under the time before it: `synopsis_passages`): tokens are the block's cost.
            label = f"{label}, {passage.time}"
            shown = passage.time
        lines.append(f"{label}: {''.join(parts)}")
    return "\n".join(lines)


def _choose(candidates: Sequence[_Sentence], worth: _Worth, limit_chars: int) -> list[_Sentence]:
    """The sentences to quote within `limit_chars`: greedily, the one that adds most per
    character (`_Worth`) among those that still fit, until none does. What a sentence adds
    only falls as others are chosen, so a sentence is looked at again only when its stale
    worth still leads (a lazy greedy: a huge message stays fast). Ties go to the earlier
    sentence, so the same input always gives the same bytes."""

    def cost(position: int) -> int:
        return len(candidates[position].text) + len(ELISION)

    def density(position: int) -> float:
        # A sentence with no word of substance still fills room that nothing else wants.
        value = worth.of(position, candidates[position].by_user) or EMPTY_WORTH
        return value / cost(position)

    heap = [(-density(i), i) for i in range(len(candidates))]
    heapq.heapify(heap)
    chosen: list[_Sentence] = []
    used = 0
    while heap:
        _stale, position = heapq.heappop(heap)
        if used + cost(position) > limit_chars:
            continue  # it never fits again: the room only shrinks
        fresh = -density(position)
        if heap and fresh > heap[0][0] + 1e-12:
            heapq.heappush(heap, (fresh, position))  # worth less now: look again in its place
            continue
        chosen.append(candidates[position])
        worth.take(position)
        used += cost(position)
    return chosen


# Many texts' token counts, in order (the engine's counter, batched off the event loop).
Count = Callable[[list[str]], Awaitable[list[int]]]
QUOTE_FITS = 3  # tries at a quote's character limit before its size is taken as it is


async def quote_passages(passages: Sequence[Passage], target: int, count: Count) -> tuple[str, int]:
    """The passages quoted (`extract_passages`) in about `target` tokens as `count` measures
    them, and that size: what a fold stores when the chronicler's answer cannot be stored."""
    # About four characters a token in English; a denser script is fitted below.
    limit = target * 4
    text, tokens = "", 0
    for _try in range(QUOTE_FITS):
        text = extract_passages(passages, limit)
        (tokens,) = await count([text])
        if tokens <= target * (1 + LENGTH_TOLERANCE):
            break
        limit = max(1, int(limit * target / tokens * 0.95))
    return text, tokens


def extract_mark(label: str) -> str:
    """What ends a sentence cut to fit: it is an extract, and where the whole text is (a
    message's or a chapter's id, "#12" of "#12 Mara"; a label with none, "So far", whole)."""
    where = label.split(" ", 1)[0] if label.startswith("#") else label
    return f" … [extract of {where}]"


def _shorten(text: str, limit_chars: int, label: str) -> str:
    """`text` cut at the last word that fits (inside the first word when even that one is
    too long), and marked as an extract of `label`'s text."""
    mark = extract_mark(label)
    room = max(1, limit_chars - len(mark))
    words = text.split()
    kept: list[str] = []
    for word in words:
        if len(" ".join([*kept, word])) > room and kept:
            break
        kept.append(word)
    short = " ".join(kept)
    if len(short) > room:
        short = short[:room]
    return short + mark if short != " ".join(words) else short


SO_FAR = "So far"  # the label of an earlier synopsis's lines in a quoted synopsis
_RANGE = re.compile(r"#\d+-#\d+")  # a chapter's label in a quoted synopsis


def label_time(story_time: str | None) -> str | None:
    """A chapter's in-story time as a quoted line's label carries it ("#33-#51, <time>: "), or
    None when it has none. The time is free text (the chronicler's, or a scene's date): its
    line breaks and runs of spaces become one space, and a ": " inside it becomes " - ", so
    the label stays one line and ends at its first ": " when the quote is read back
    (`synopsis_passages`). A colon with no space after it ("10:30") stays."""
    if story_time is None:
        return None
    time = " ".join(story_time.split()).replace(": ", " - ").rstrip(":").strip()
    return time or None


def synopsis_passages(
    base: str | None, chapters: Sequence[Chapter], *, base_quoted: bool = False
) -> list[Passage]:
    """What a synopsis quotes: the earlier synopsis (`base`), then each chapter under its range
    and its in-story time ("#33-#51, Wednesday, 31 October 2018").

    A quoted earlier synopsis (`base_quoted`: its origin says so) is quoted by its own lines
    after its first (the line that tells the reader it is quoted), each under the label it has
    ("So far", "#33-#51") and the time it was under, not under a label of its own: labelled
    again, it read "So far: So far: #1-#32: ..." after two quoted major folds. A quoted line
    says its time once for a run of lines (`extract_passages`), so a chapter's line without a
    time is under the time of the line before it."""
    passages: list[Passage] = []
    quoted = base.partition("\n")[2].strip() if base and base_quoted else None
    if quoted is not None:
        time: str | None = None
        for line in quoted.splitlines():
            label, colon, text = line.partition(": ")
            if not colon:
                passages.append(Passage(SO_FAR, line))
                continue
            where, comma, when = label.partition(", ")
            if _RANGE.fullmatch(where):
                # A synopsis quoted from chapters stored before D-51 may carry a time the
                # grammar cut there ("…"): no time (story_dates.told_time).
                time = label_time(told_time(when)) if comma else time
                passages.append(Passage(where, text, time=time))
            else:
                passages.append(Passage(label, text))
    elif base and base.strip():
        passages.append(Passage(SO_FAR, base))
    passages += [
        Passage(
            f"#{c.first_message_id}-#{c.last_message_id}", c.text, time=label_time(c.story_time)
        )
        for c in chapters
    ]
    return passages
