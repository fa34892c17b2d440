"""Whether an item of a chapter rests on the messages it cites (grounding, checked in code).

A base model writes fluent items about things nobody said (docs/decisions.md D-5). The quality
gate (`structured.says_something`) cannot see that: the sentence says
something, just not anything that was said. So an item's content terms are looked for in the
text of the messages it cites, and an item too few of whose terms are there is not memory.

Content terms are the term module's (kotonia_tui/terms.py), without the cast's names (a model
writes the cast's names around anything, so they prove nothing): content words of spaced
scripts, found when a word of the source shares their start, so inflections count ("marries",
"married"); numbers, each of which must be there; and the character bigrams of scripts written
without spaces (Japanese, Chinese, Thai, ...).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kotonia_tui import terms
from kotonia_tui.memory.extract import without_references
from kotonia_tui.sentences import sentences
from kotonia_tui.terms import Content

# The share of an item's terms its source must hold. Words: a capable model's paraphrase keeps
# most of the content words and changes a few ("Mara's sister Ilse is getting married" for "My
# sister Ilse marries on the 14th": sister, ilse, married found, getting not: 3 of 4), while an
# invention shares next to none (shop, umbrella, going: 0 of 3); half sits between the two with
# room either side. Bigrams: a paraphrase in Japanese or Chinese changes the particles and the
# endings around the nouns it keeps, and every changed character costs two bigrams, so the
# measured paraphrases hold 0.5-0.6 of theirs (tests/memory/test_grounding.py); an invention holds
# nearly none; the threshold is lower to keep the paraphrases.
WORD_SHARE = 0.5
BIGRAM_SHARE = 0.4


def _terms(text: str, cast: Iterable[str]) -> Content:
    return terms.content(text, cast)


def content(text: str, cast: Iterable[str] = ()) -> frozenset[str]:
    """What `text` says, as the set of its content terms (words, numbers, and bigrams in scripts
    without spaces; the cast's names and framing words left out): two texts with the same set
    say the same thing ("User says: I can pay 300 crowns" and "I can pay 300 crowns")."""
    return _terms(text, cast).terms()


def says_again(text: str, base: str, cast: Iterable[str] = ()) -> bool:
    """Whether `text` says nothing `base` did not: each of its content terms is in `base` (a
    word by its start; the labels and message ids either cites do not count). A text with no
    content term says nothing new either."""
    old = content(without_references(base), cast)
    new = content(without_references(text), cast)
    return all(t in old or terms.holds_word(t, old) for t in new)


def _support(item: Content, source: str) -> float | None:
    """The share of the terms `source` holds, or None when it lacks one of the numbers."""
    # A number is a specific: one the cited messages do not hold makes the item wrong however
    # many of its words they hold ("the room costs 75" for "the room costs 40").
    held = set(terms.numbers(source))
    if any(n not in held for n in item.numbers):
        return None
    source_words = terms.spaced_words(source)
    found = len(item.numbers)
    found += sum(1 for w in item.words if w in source_words or terms.holds_word(w, source_words))
    found += sum(1 for g in item.grams if g in source)
    return found / (len(item.words) + len(item.numbers) + len(item.grams))


def _threshold(item: Content) -> float:
    return BIGRAM_SHARE if len(item.grams) > len(item.words) + len(item.numbers) else WORD_SHARE


def only_names_the_cast(item: str, cast: Iterable[str]) -> bool:
    """Whether the only words of substance in `item` (its labels and message ids left out) are
    the cast's names: "Corwin and Mara (#81)", "Mara met Corwin", "Bo and Ann". The names are
    in any message of the range, so such an item passes `grounded` and `evidence` (it has
    nothing to check) while it tells the reader nothing. A word of substance is a content term
    (terms.content) or a capitalized word that is no name of the cast and no common word
    ("Ann and Mia" names someone else: it is checked as any item is)."""
    names = tuple(n.strip() for n in cast if n.strip())
    text = without_references(item)
    if _terms(text, names):
        return False
    name_words = {terms.fold(word) for name in names for word in terms.tokens(name)}
    words = [(word, terms.fold(word)) for word in terms.tokens(text)]
    if any(w[:1].isupper() and f not in name_words | terms.STOP_WORDS for w, f in words):
        return False
    # It names one of the cast: a word of a name ("Bo", "Ann": too short to be content
    # terms), or a name written without spaces ("月島").
    folded = text.casefold()
    return any(f in name_words for _w, f in words) or any(
        name.casefold() in folded for name in names if terms.has_unspaced(name)
    )


def grounded(item: str, sources: Sequence[str], cast: Iterable[str] = ()) -> bool:
    """Whether enough of `item`'s content is in the texts of `sources` (every number, WORD_SHARE
    of its words and numbers, BIGRAM_SHARE of its bigrams in scripts without spaces). An item
    with no content term (only the cast's names and short words) has nothing to check and is
    kept."""
    found = _terms(item, cast)
    if not found:
        return True
    share = _support(found, "\n".join(sources))
    return share is not None and share >= _threshold(found)


def evidence(
    item: str, cited: Sequence[int], texts: Mapping[int, str], cast: Iterable[str] = ()
) -> tuple[int, ...]:
    """The messages `item` rests on: the ones it cites when they hold it, else the one message
    of `texts` (the candidates: the range, or the user's lines of it) that holds the most of
    it, if that is enough; () when none does.

    A small model cites the wrong lines for a right item (D-5): only its ids are wrong, and
    the code can find the right one."""
    cited = tuple(i for i in cited if i in texts)
    found = _terms(item, cast)
    if not found:
        return cited  # nothing to look for: the citation stands as given
    threshold = _threshold(found)
    share = _support(found, "\n".join(texts[i] for i in cited)) if cited else None
    if share is not None and share >= threshold:
        return cited
    best: tuple[float, int] | None = None
    for i, text in texts.items():
        share = _support(found, text)
        if share is not None and (best is None or share > best[0]):
            best = (share, i)
    if best is None or best[0] < threshold:
        return ()
    return (best[1],)


@dataclass(frozen=True)
class GroundedProse:
    """A prose text without its sentences that rest on nothing it summarizes (`ground_prose`)."""

    text: str  # the grounded sentences, line by line as written ("" when none is)
    dropped: tuple[str, ...] = ()  # the sentences left out, in their order


def ground_prose(text: str, sources: Sequence[str], cast: Iterable[str] = ()) -> GroundedProse:
    """`text` (a synopsis draft) keeping only the sentences `grounded` in `sources` (what it
    folds), as a chapter keeps only its grounded items (D-5). A small chronicler writes
    sentences about itself or about nothing in the story ("So far in the story, I have not
    found a single word of this story."): stored beside a grounded line, such a sentence passes
    every check of the draft as a whole and takes the synopsis's room from the story. Labels
    and message ids do not count as content; a line whose every sentence is dropped is left
    out, and the lines kept keep their order and their sentences' order."""
    names = tuple(cast)
    folded = ["\n".join(sources)]  # joined once, not for every sentence
    checked = [
        (line, [(s, grounded(without_references(s), folded, names)) for s in sentences(line)])
        for line in text.splitlines()
    ]
    dropped = tuple(s for _line, said in checked for s, ok in said if not ok)
    if not dropped:
        return GroundedProse(text.strip())  # the usual case: the draft as written
    lines: list[str] = []
    for line, said in checked:
        kept = [s for s, ok in said if ok]
        left = line if len(kept) == len(said) else " ".join(kept)
        if left.strip() or (lines and lines[-1].strip()):  # one blank line between paragraphs
            lines.append(left)
    return GroundedProse("\n".join(lines).strip(), dropped)
