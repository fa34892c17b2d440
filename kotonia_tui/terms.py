"""What a word is, and when two texts hold "the same words": one set of rules for all of Kotonia.

The full-text index (store/search.py) decides what a search finds; the same rules decide what
search highlights (search_text.py), what recall shows a message matched and whether the memory
already states it (memory/recall.py), whether a chapter's item rests on its messages
(memory/grounding.py), which names and numbers the readback looks for (memory/readback.py), what
the extract scores (memory/extract.py) and the evaluation's lexical grades (eval/grading.py).

- A token is a run of letters, combining marks and digits, in any script, as the index's
  unicode61 tokenizer keeps them (with marks inside words: "हिन्दी", "ไปโรงเรียน" are one token);
  anything else separates tokens, so "sister's" is "sister" and "s".
- Scripts written without spaces between words are "unspaced": Han (every extension), kana,
  Thai, Lao, Khmer, Myanmar and the Tai scripts, decided from each character's Unicode script
  (`UNSPACED_SCRIPTS`), not from a table of ranges. A token ends where an unspaced run meets
  a spaced one ("東京でiPhone" is "東京で" and "iPhone"). An unspaced run is compared as
  characters: substrings in the index, character n-grams here. Korean is spaced: it puts
  spaces between words (its particles attach at the end: the shared start below takes
  "학교에" for "학교"; recall, which matches whole words, does not).
- Case and accents are folded as the index folds them: lower case, and Latin letters without
  their accents ("Café" is "cafe"). Other scripts keep their marks, as the index does.
- A number is a run of decimal digits in any script with the separators inside it ("3.50",
  "14:30", "1,200"), compared as ASCII digits ("٣٠٠" is "300").
- A content word is a spaced run of letters (no digits) of `CONTENT_LETTERS` letters or more,
  counted decomposed (a Hangul syllable is its two or three letters), and not a common word
  (`STOP_WORDS`; grading leaves out only `ARTICLES`).
- Two content words are the same when they share their start and end within a few letters of
  it (`same_word`): "married" is "marries", "walk" is "walked", "학교에" is "학교"; "light" is
  not "lighthouse" (a new word, not an ending). `stem_forms` adds a word's stems without a
  common ending ("walked": "walk"), so that "walked" finds "walking" too.
- Recall asks about a text's content words (`recall_terms`): the question and function words
  ("what", "did", "remember") and the speakers' names (`ignore`) match nearly every message
  and tell none apart.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import regex

# Scripts written without spaces between words, by their Unicode script names.
UNSPACED_SCRIPTS = (
    *("Han", "Hiragana", "Katakana"),
    *("Thai", "Lao", "Khmer", "Myanmar"),
    *("Tai_Le", "New_Tai_Lue", "Tai_Tham", "Tai_Viet"),
)
_OWN = "".join(rf"\p{{sc={name}}}" for name in UNSPACED_SCRIPTS)
_SHARED = "".join(rf"\p{{scx={name}}}" for name in UNSPACED_SCRIPTS)
# A letter or mark of those scripts, or a common one only they use (the prolonged sound mark
# "ー", the iteration marks), not one Latin uses too (combining accents, the modifier apostrophe).
_UNSPACED = (
    rf"[[\p{{L}}\p{{M}}\p{{Nl}}]&&[[{_OWN}]||[[{_SHARED}]&&[\p{{sc=Zyyy}}\p{{sc=Zinh}}]"
    r"--\p{scx=Latn}]]]"
)
_UNSPACED_CHAR = regex.compile(rf"(?V1){_UNSPACED}")
_ASCII_TOKEN = re.compile(r"[A-Za-z0-9]+")
_DIGITS = regex.compile(r"\d+")
_NUMBER = regex.compile(r"\d+(?:[.,:/]\d+)*")  # \d: decimal digits of every script
_NAME_JOINERS = "'’-"  # inside a name: "O'Brien", "Jean-Luc"
# What may end a sentence before the next word (so a capital after it is no sign of a name),
# besides a line break.
# What a sentence's first word may follow: its end before, or the marks that open a line of
# speech or of markup (quotes of every kind, a dialogue dash, `*`, `_`, `~`, brackets). The
# word after "`Stupid." or "— Twice" is not a name for its capital.
_SENTENCE_MARKS = frozenset(".!?。！？:;\"“”„«‹‘'`*_~([{「『（—–¡¿")
_NOT_NAMES = frozenset({"i", "i'm", "i've", "i'll", "i'd", "ok", "okay", "oh", "yes", "no"})

CONTENT_LETTERS = 4  # shorter words are function words in most spaced languages
# Two words are one when they share a start this long (or the shorter one whole, if it is at
# least CONTENT_LETTERS long): "marri(es|ed)", "allerg(y|ic)", "shop(ping)"; "umbr(ella|age)" not.
STEM = 5
# ... and neither goes on past that shared start by more than this many letters: an ending
# ("-ed", "-ing", "-ies"), not another word ("light" and "lighthouse", "sea" and "season").
MAX_ENDING = 4
# Endings a word's stem is looked for without (`stem_forms`): what spaced languages most often
# add to a stem of CONTENT_LETTERS letters or more ("walk|ed", "walk|ing", "marr|ies" -> marry).
# Each stem must keep CONTENT_LETTERS letters, and `same_word` bounds what it then matches.
ENDINGS = ("ing", "ed", "es", "s", "er", "ers", "est", "ly", "e")
Y_ENDINGS = ("ies", "ied", "ier", "iest")  # "married" -> "marry"
ARTICLES = frozenset({"a", "an", "the"})
# Common words that carry no content: English function words, and the verbs a chronicler frames
# an item with ("Mara tells Piet that ...") that its source never holds. Other spaced languages
# rely on CONTENT_LETTERS alone, and the threshold leaves room for that.
# Words of fewer than CONTENT_LETTERS letters that recall (which keeps short words: "rum",
# "tea", "cat") must not look for.
SHORT_STOP_WORDS = frozenset(
    (
        *("i", "me", "my", "we", "us", "our", "you", "he", "him", "his", "she", "her", "it"),
        *("its", "who", "why", "how", "did", "do", "is", "am", "are", "was"),
        *("be", "has", "had", "can", "may", "of", "to", "in", "on", "at", "by", "for", "as"),
        *("or", "and", "but", "if", "so", "not", "no", "yes", "all", "any", "out", "up"),
        *("off", "too", "own", "s", "t", "d", "ll", "re", "ve", "m", "o", "get", "got"),
        *("let", "say", "ask", "one", "now", "oh", "ok", "eh", "ah"),
    )
)
STOP_WORDS = (
    ARTICLES
    | SHORT_STOP_WORDS
    | frozenset(
        (
            *("that", "this", "these", "those", "with", "from", "have", "having", "will"),
            *("would", "could", "should", "about", "their", "there", "they", "them", "then"),
            *("than", "when", "what", "which", "while", "were", "been", "being", "into"),
            *("onto", "also", "just", "very", "some", "your", "says", "said", "tells", "told"),
            *("asks", "asked", "wants", "wanted", "user"),
            # Question words and what a question is framed with: a question's query is its
            # content words ("What did Mara say about the clapper?": "clapper").
            *("where", "whom", "whose", "does", "doing", "done", "remember", "remembers"),
            *("remembered", "tell", "telling", "know", "knows", "knew", "think", "thought"),
            *("recall", "again", "ever", "anything", "something", "everything", "nothing"),
            *("please", "yours", "mine", "ours", "theirs", "here", "each", "every", "other"),
            *("such", "only", "much", "many", "more", "most", "didn", "doesn", "wasn"),
            *("weren", "haven", "hasn", "hadn", "wouldn", "couldn", "shouldn", "isn", "aren"),
            *("yourself", "myself", "himself", "herself", "itself", "themselves", "because"),
            *("until", "once", "same"),
        )
    )
)


_SEPARATOR, _SPACED, _UNSPACED_KIND = 0, 1, 2


@functools.lru_cache(maxsize=1 << 16)
def _kind(char: str) -> int:
    """A character's part in a token. A word character is what unicode61 keeps with marks
    kept: letters, marks, numbers, private use (store/migrations.py)."""
    if _UNSPACED_CHAR.match(char) is not None:
        return _UNSPACED_KIND
    category = unicodedata.category(char)
    return _SPACED if category[0] in "LMN" or category == "Co" else _SEPARATOR


def _runs(text: str) -> Iterator[tuple[int, int, bool]]:
    """Where `text`'s tokens are (start, end) and whether each is unspaced. A loop over the
    characters, each classified once per process: the `regex` module's Unicode classes cost
    microseconds a character, and a memory block is tens of thousands."""
    if text.isascii():
        for found in _ASCII_TOKEN.finditer(text):
            yield found.start(), found.end(), False
        return
    start, kind = 0, _SEPARATOR
    for at, char in enumerate(text):
        now = _kind(char)
        if now != kind:
            if kind != _SEPARATOR:
                yield start, at, kind == _UNSPACED_KIND
            start, kind = at, now
    if kind != _SEPARATOR:
        yield start, len(text), kind == _UNSPACED_KIND


def is_unspaced_char(char: str) -> bool:
    """A letter or mark of a script written without spaces between words."""
    return _kind(char) == _UNSPACED_KIND


def is_spaced_word_char(char: str) -> bool:
    """A letter, mark or digit of a script that separates words with spaces (where a word's
    edges mean something)."""
    return _kind(char) == _SPACED


def has_unspaced(text: str) -> bool:
    return not text.isascii() and any(_kind(char) == _UNSPACED_KIND for char in text)


@functools.cache
def unspaced_ranges() -> tuple[tuple[int, int], ...]:
    """The code points of the unspaced scripts as ranges (first, last), for SQL that must pick
    the same messages (the index's GLOB class). Read from Unicode data: a tenth of a second,
    once, and only where a schema step needs it."""
    every = "".join(chr(c) for c in range(0x40000) if not 0xD800 <= c < 0xE000)
    runs = regex.compile(rf"(?V1){_UNSPACED}+")
    return tuple((ord(m.group()[0]), ord(m.group()[-1])) for m in runs.finditer(every))


def tokens(text: str, *, unspaced_gram: int | None = None) -> list[str]:
    """`text`'s tokens, as typed, in order. `unspaced_gram`: unspaced runs cut into character
    n-grams of that size (overlapping; a shorter run whole), else each run is one token."""
    out: list[str] = []
    for start, end, unspaced in _runs(text):
        token = text[start:end]
        if unspaced_gram is not None and unspaced:
            out.extend(ngrams(token, unspaced_gram))
        else:
            out.append(token)
    return out


def ngrams(run: str, n: int) -> list[str]:
    """Overlapping n-grams of characters; a run shorter than n is one."""
    return [run[i : i + n] for i in range(max(1, len(run) - n + 1))]


@functools.lru_cache(maxsize=1 << 16)
def fold_char(char: str) -> str:
    """One character folded as the index compares: lower case, a Latin letter without its
    accents. Always one character (a character whose lower case is longer stays as it is)."""
    lowered = char.lower()
    if len(lowered) != 1:
        return char
    base = unicodedata.normalize("NFD", lowered)
    if len(base) > 1 and regex.match(r"\p{sc=Latn}", base[0]):
        return base[0]
    return lowered


def fold(text: str) -> str:
    """`text` folded for comparing words as the index compares them: "Café" is "cafe", written
    composed or not. Not one for one (search_text folds a character at a time for that)."""
    if text.isascii():
        return text.lower()  # the usual case, and the same answer
    return "".join(fold_char(char) for char in unicodedata.normalize("NFC", text))


def numbers(text: str) -> list[str]:
    """The numbers in `text`, in order, as ASCII digits with their inner separators."""
    return [_ascii_digits(m.group()) for m in _NUMBER.finditer(text)]


def _ascii_digits(number: str) -> str:
    return "".join(str(unicodedata.decimal(c)) if c.isdecimal() else c for c in number)


def is_number(term: str) -> bool:
    """A term that is a number (a content term of digits, with any separators inside)."""
    return term[:1].isdecimal()


def holds_number(text: str, number: str) -> bool:
    """Whether `text` has `number` whole (not inside a longer one: "40" is not in "140")."""
    return number in numbers(text)


def letters(word: str) -> int:
    """A word's length in letters, counted decomposed (a Hangul syllable is two or three)."""
    return len(unicodedata.normalize("NFD", word))


def same_word(a: str, b: str) -> bool:
    """Two folded words are one when they share a start of STEM letters, or the shorter one
    whole if it has CONTENT_LETTERS letters or more ("marries", "married"; "walk", "walked"),
    and the longer goes on past that start by MAX_ENDING letters at most ("light" is not
    "lighthouse")."""
    if a == b:
        return True
    a, b = unicodedata.normalize("NFD", a), unicodedata.normalize("NFD", b)
    shared = _shared_start(a, b)
    return (
        shared >= CONTENT_LETTERS
        and shared >= min(len(a), len(b), STEM)
        and max(len(a), len(b)) - shared <= MAX_ENDING
    )


def _shared_start(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@functools.lru_cache(maxsize=1 << 12)
def stem_forms(word: str) -> tuple[str, ...]:
    """A folded word and its stems without a common ending (`ENDINGS`), each of at least
    CONTENT_LETTERS letters: "walked" is ("walked", "walk"), "married" ("married", "marri",
    "marry"). A word `same_word` as any of them is another form of it."""
    forms = [word]
    if not word.isalpha():
        return tuple(forms)
    for ending in Y_ENDINGS:
        if word.endswith(ending) and letters(word) - len(ending) + 1 >= CONTENT_LETTERS:
            forms.append(word[: -len(ending)] + "y")
    for ending in ENDINGS:
        if word.endswith(ending) and letters(word) - len(ending) >= CONTENT_LETTERS:
            forms.append(word[: -len(ending)])
    return tuple(dict.fromkeys(forms))


def same_stem(word: str, term: str) -> bool:
    """Whether folded `word` is a form of the folded query `term` (`same_word` as it or as one
    of its `stem_forms`)."""
    return any(same_word(word, form) for form in stem_forms(term))


def holds_word(word: str, words: Iterable[str]) -> bool:
    """Whether `words` (folded) has `word` or another form of it (`same_word`)."""
    return any(same_word(word, other) for other in words)


@dataclass(frozen=True)
class Content:
    """What a text says, as terms: content words (folded), numbers, and the character n-grams
    of its unspaced runs."""

    words: tuple[str, ...]
    numbers: tuple[str, ...]
    grams: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.words or self.numbers or self.grams)

    def terms(self) -> frozenset[str]:
        return frozenset((*self.words, *self.numbers, *self.grams))


def content(
    text: str,
    names: Iterable[str] = (),
    *,
    stop_words: frozenset[str] = STOP_WORDS,
    min_letters: int = CONTENT_LETTERS,
    gram: int = 2,
) -> Content:
    """The content terms of `text`: its content words, numbers and unspaced n-grams, without
    `names` (each name whole, and its words: a cast's names are written around anything, so
    they prove nothing)."""
    name_list = sorted({n.strip() for n in names if n.strip()}, key=len, reverse=True)
    name_words = {fold(w) for name in name_list for w in tokens(name)}
    for name in name_list:
        text = text.replace(name, " ")
    words: list[str] = []
    grams: list[str] = []
    for start, end, unspaced in _runs(text):
        token = text[start:end]
        if unspaced:
            grams.extend(ngrams(token, gram))
            continue
        for part in _letter_parts(token):
            word = fold(part)
            if word not in name_words and word not in stop_words and letters(word) >= min_letters:
                words.append(word)
    return Content(tuple(words), tuple(numbers(text)), tuple(grams))


def _letter_parts(token: str) -> list[str]:
    """A spaced token's runs of letters, without its digits ("14th" has "th")."""
    return [part for part in _DIGITS.split(token) if part]


def spaced_words(text: str) -> set[str]:
    """Every spaced run of letters in `text`, folded (what a content word is looked for in)."""
    return {
        fold(part)
        for start, end, unspaced in _runs(text)
        if not unspaced
        for part in _letter_parts(text[start:end])
    }


def _name_shapes(text: str) -> Iterator[tuple[int, str]]:
    """Spaced tokens with the apostrophes and hyphens that join them ("O'Brien")."""
    current: tuple[int, int] | None = None
    for start, end, unspaced in _runs(text):
        if unspaced:
            continue
        if current is not None and start == current[1] + 1 and text[current[1]] in _NAME_JOINERS:
            current = (current[0], end)
            continue
        if current is not None:
            yield current[0], text[current[0] : current[1]]
        current = (start, end)
    if current is not None:
        yield current[0], text[current[0] : current[1]]


def _starts_sentence(text: str, at: int) -> bool:
    """Whether the word at `at` is the first of its text, line or sentence."""
    i = at - 1
    while i >= 0 and text[i].isspace():
        if text[i] == "\n":
            return True
        i -= 1
    return i < 0 or text[i] in _SENTENCE_MARKS


def names(text: str) -> list[tuple[int, str]]:
    """The names in `text` with where they start: capitalized words that are not merely the
    first word of a sentence (unless the same word is capitalized inside one too). Scripts
    without capitals give none."""
    inside: set[str] = set()
    candidates: list[tuple[int, str, bool]] = []
    for at, word in _name_shapes(text):
        first = word[0]
        if not (first.isupper() or first.istitle()) or word.casefold() in _NOT_NAMES:
            continue
        starts_sentence = _starts_sentence(text, at)
        if not starts_sentence:
            inside.add(word)
        candidates.append((at, word, starts_sentence))
    return [(at, w) for at, w, first in candidates if not first or w in inside]


def specifics(text: str) -> list[str]:
    """The names and numbers of `text`, in order (numbers as written)."""
    found = [(m.start(), m.group()) for m in _NUMBER.finditer(text)]
    return [item for _, item in sorted(found + names(text))]


_POSSESSIVE = re.compile(r"['’]s?$")


def _name_base(word: str) -> str:
    """A name-shaped word as names are compared: folded, without a possessive ending
    ("Gull's" is "gull", "Hélène’s" is "helene")."""
    return _POSSESSIVE.sub("", fold(word))


@functools.lru_cache(maxsize=256)
def _written_names(text: str) -> frozenset[str]:
    """The words of `text` written as names could be (a capital first), as `_name_base`, and
    the parts of a hyphenated one ("Mara-san" keeps "Mara")."""
    written: set[str] = set()
    for _at, word in _name_shapes(text):
        if word[0].isupper() or word[0].istitle():
            base = _name_base(word)
            written.add(base)
            written.update(part for part in base.split("-") if part)
    return frozenset(written)


def holds_specific(text: str, item: str) -> bool:
    """Whether `text` keeps a name or a number. A name is kept as a whole word with its capital
    (Latin accents and a possessive aside: "Helene's" keeps "Hélène"): "Old" is not kept by
    "told" or "the old keeper", nor "Brass" by "the brass instrument". A number is kept whole,
    in any digits."""
    if item[0].isdecimal():
        return holds_number(text, _ascii_digits(item))
    return _name_base(item) in _written_names(text)


# Search and recall: the query's terms.


@dataclass(frozen=True)
class Term:
    text: str  # as typed (case kept); matching ignores case
    unspaced: bool  # matched as a substring (an unspaced script), else at a word start


def split_terms(query: str) -> list[Term]:
    """The query's tokens as terms, in order, each once (case-insensitively)."""
    seen: set[str] = set()
    terms = []
    for start, end, unspaced in _runs(query):
        text = query[start:end]
        key = fold(text)
        if key not in seen:
            seen.add(key)
            terms.append(Term(text, unspaced))
    return terms


def recall_terms(text: str, ignore: Iterable[str] = ()) -> list[Term]:
    """The terms recall looks for in `text` (store/search.py) and shows as why a message came
    back (memory/recall.py): its content words, each matching its other forms (`same_stem`),
    and numbers. Left out: one-letter words (not numbers), `STOP_WORDS` (a question's framing:
    "what", "did", "remember") and the words of the names in `ignore` (the speakers: every
    message is said by one of them, so their names tell none apart). Unspaced terms are cut
    into overlapping pairs of characters (most Japanese and Chinese words are two characters
    long: 名前, 東京), any of which counts."""
    ignored = {fold(word) for name in ignore for word in tokens(name)}
    out: list[Term] = []
    for term in split_terms(text):
        if term.unspaced:
            out.extend(Term(pair, True) for pair in ngrams(term.text, 2))
            continue
        key = fold(term.text)
        if key in ignored or key in STOP_WORDS:
            continue
        if len(term.text) > 1 or term.text.isdecimal():
            out.append(term)  # a lone digit is a specific ("day 3"), a lone letter is not
    unique = {fold(t.text): t for t in out}
    return list(unique.values())


def substance(text: str) -> list[Term]:
    """The terms of `text` that carry its specifics: spaced words of CONTENT_LETTERS letters
    or more or with a digit, and every pair of characters of a script written without spaces."""
    return [
        term
        for term in recall_terms(text)
        if term.unspaced
        or letters(fold(term.text)) >= CONTENT_LETTERS
        or any(c.isdecimal() for c in term.text)
    ]


def name_words(text: str, known: Iterable[str] = ()) -> frozenset[str]:
    """The folded words of the names in `text` (capitalised words that are not merely a
    sentence's first, `names`) and the words of `known` names it holds, in any case: what a
    query weighs most."""
    found = {fold(word) for _at, name in names(text) for word in tokens(name)}
    words = {fold(word) for word in tokens(text)}
    found.update(w for name in known for w in map(fold, tokens(name)) if w in words)
    return frozenset(found)


@dataclass(frozen=True)
class Searchable:
    """A text as recall matches terms in it: a spaced term as a whole word or another form of
    it (`same_stem`), an unspaced one as a substring, all folded."""

    words: frozenset[str]
    folded: str
    by_start: dict[str, tuple[str, ...]]  # words of CONTENT_LETTERS or more by their start

    @classmethod
    def of(cls, text: str) -> Searchable:
        return _searchable(text)

    def holds(self, term: Term) -> bool:
        key = fold(term.text)
        if term.unspaced:
            return key in self.folded
        if key in self.words:
            return True
        return any(
            same_word(word, form)
            for form in stem_forms(key)
            for word in self.by_start.get(_start(form), ())
        )


def _start(word: str) -> str:
    """The first CONTENT_LETTERS letters of a word, decomposed: two words `same_word` share
    them."""
    return unicodedata.normalize("NFD", word)[:CONTENT_LETTERS]


@functools.lru_cache(maxsize=8)
def _searchable(text: str) -> Searchable:
    """A text read once for all the candidates of a turn (the memory block is one text)."""
    folded = fold(text)
    words = frozenset(folded[start:end] for start, end, _ in _runs(folded))
    by_start: dict[str, list[str]] = {}
    for word in words:
        if letters(word) >= CONTENT_LETTERS and word.isalpha():
            by_start.setdefault(_start(word), []).append(word)
    return Searchable(words, folded, {k: tuple(v) for k, v in by_start.items()})
