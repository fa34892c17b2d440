"""Whether an item of a chapter rests on the messages it cites (grounding, checked in code).

A base model writes fluent items about things nobody said: on the embedded Gemma 3 270M a
chapter held "User says: I'm going to the shop to buy a new umbrella," as a user fact, a rule, a
thread and an event, in every chapter of a ten-turn chat whose messages never mention a shop or an
umbrella. The quality gate (`structured.says_something`) cannot see that: the sentence says
something, just not anything that was said. So an item's content terms are looked for in the
text of the messages it cites, and an item too few of whose terms are there is not memory.

Content terms, by script:
- spaced scripts: words of at least `_MIN_LETTERS` letters (short words are function words in
  most of them), not the cast's names (a model writes the cast's names around anything, so they
  prove nothing), not a few English framing and function words; and whole numbers, each of
  which must be there. A word is found when a word of the source shares its start (`_STEM`), so
  inflections count ("marries", "married"). Hangul words count from two syllables (its
  particles attach at the end);
- scripts written without spaces (Japanese, Chinese, Thai, ...): character bigrams of each run,
  after the cast's names are taken out of the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from kotonia_tui.memory.extract import without_references

# A run of a script written without spaces between words: Han, kana, Thai, Lao, Myanmar, Khmer.
_UNSPACED = (
    "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
    "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff"
)
_UNSPACED_RUN = re.compile(f"[{_UNSPACED}]+")
_HANGUL = re.compile("[\uac00-\ud7af]")
_WORD = re.compile(r"[^\W\d_]+")
_NUMBER = re.compile(r"\d+")
_MIN_LETTERS = 4
_MIN_HANGUL = 2
# Two words are one when they share a start this long (or the shorter one whole, if it is at
# least _MIN_LETTERS long): "marri(es|ed)", "allerg(y|ic)", "shop(ping)"; "umbr(ella|age)" not.
_STEM = 5
# Words of four letters or more that carry no content: English function words, and the verbs
# a chronicler frames an item with ("Mara tells Piet that ...") that its source never holds.
# Other spaced languages rely on the length alone, and the threshold leaves room for that.
_FRAME = frozenset(
    (
        *("that", "this", "these", "those", "with", "from", "have", "having", "will", "would"),
        *("could", "should", "about", "their", "there", "they", "them", "then", "than", "when"),
        *("what", "which", "while", "were", "been", "being", "into", "onto", "also", "just"),
        *("very", "some", "your", "says", "said", "tells", "told", "asks", "asked", "wants"),
        *("wanted", "user"),
    )
)
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


def _names(cast: Iterable[str]) -> tuple[set[str], list[str]]:
    words: set[str] = set()
    whole: list[str] = []
    for name in cast:
        if name.strip():
            whole.append(name.strip())
            words.update(w.casefold() for w in _WORD.findall(name))
    return words, sorted(whole, key=len, reverse=True)


def _terms(text: str, cast: Iterable[str]) -> tuple[list[str], list[str]]:
    """The content words (and numbers) and the bigrams of `text`, without the cast's names."""
    name_words, whole = _names(cast)
    for name in whole:
        text = text.replace(name, " ")
    bigrams: list[str] = []
    for run in _UNSPACED_RUN.findall(text):
        bigrams.extend(run[i : i + 2] for i in range(max(1, len(run) - 1)))
    spaced = _UNSPACED_RUN.sub(" ", text)
    words = [
        w
        for w in (m.casefold() for m in _WORD.findall(spaced))
        if w not in name_words
        and w not in _FRAME
        and len(w) >= (_MIN_HANGUL if _HANGUL.match(w) else _MIN_LETTERS)
    ]
    return words + _NUMBER.findall(spaced), bigrams


def content(text: str, cast: Iterable[str] = ()) -> frozenset[str]:
    """What `text` says, as the set of its content terms (words, numbers, and bigrams in scripts
    without spaces; the cast's names and framing words left out): two texts with the same set
    say the same thing ("User says: I can pay 300 crowns" and "I can pay 300 crowns")."""
    words, bigrams = _terms(text, tuple(cast))
    return frozenset(words + bigrams)


def says_again(text: str, base: str, cast: Iterable[str] = ()) -> bool:
    """Whether `text` says nothing `base` did not: each of its content terms is in `base` (a
    word by its start; the labels and message ids either cites do not count). A text with no
    content term says nothing new either."""
    old = content(without_references(base), cast)
    new = content(without_references(text), cast)
    return all(t in old or any(_same_word(t, o) for o in old) for t in new)


def _same_word(a: str, b: str) -> bool:
    if a == b:
        return True
    stem = min(len(a), len(b), _STEM)
    return stem >= (_MIN_HANGUL if _HANGUL.match(a) else _MIN_LETTERS) and a[:stem] == b[:stem]


def _support(words: list[str], bigrams: list[str], source: str) -> float | None:
    """The share of the terms `source` holds, or None when it lacks one of the numbers."""
    source_words = {w.casefold() for w in _WORD.findall(_UNSPACED_RUN.sub(" ", source))}
    source_words.update(_NUMBER.findall(source))
    # A number is a specific: one the cited messages do not hold makes the item wrong however
    # many of its words they hold ("the room costs 75" for "the room costs 40").
    if any(w.isdigit() and w not in source_words for w in words):
        return None
    found = sum(
        1 for w in words if w in source_words or any(_same_word(w, s) for s in source_words)
    )
    found += sum(1 for b in bigrams if b in source)
    return found / (len(words) + len(bigrams))


def _threshold(words: list[str], bigrams: list[str]) -> float:
    return BIGRAM_SHARE if len(bigrams) > len(words) else WORD_SHARE


def grounded(item: str, sources: Sequence[str], cast: Iterable[str] = ()) -> bool:
    """Whether enough of `item`'s content is in the texts of `sources` (every number, WORD_SHARE
    of its words and numbers, BIGRAM_SHARE of its bigrams in scripts without spaces). An item
    with no content term (only the cast's names and short words) has nothing to check and is
    kept."""
    words, bigrams = _terms(item, tuple(cast))
    if not words and not bigrams:
        return True
    share = _support(words, bigrams, "\n".join(sources))
    return share is not None and share >= _threshold(words, bigrams)


def evidence(
    item: str, cited: Sequence[int], texts: Mapping[int, str], cast: Iterable[str] = ()
) -> tuple[int, ...]:
    """The messages `item` rests on: the ones it cites when they hold it, else the one message
    of `texts` (the candidates: the range, or the user's lines of it) that holds the most of
    it, if that is enough; () when none does.

    A small model cites the wrong lines: the embedded 270M wrote "Ann says: I promise to stay
    until the storm is over" citing Wren's line before it and Ann's first line. The item is
    the user's; only its ids are wrong, and the code can find the right one."""
    cited = tuple(i for i in cited if i in texts)
    words, bigrams = _terms(item, tuple(cast))
    if not words and not bigrams:
        return cited  # nothing to look for: the citation stands as given
    threshold = _threshold(words, bigrams)
    share = _support(words, bigrams, "\n".join(texts[i] for i in cited)) if cited else None
    if share is not None and share >= threshold:
        return cited
    best: tuple[float, int] | None = None
    for i, text in texts.items():
        share = _support(words, bigrams, text)
        if share is not None and (best is None or share > best[0]):
            best = (share, i)
    if best is None or best[0] < threshold:
        return ()
    return (best[1],)
