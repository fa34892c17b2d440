"""How text is read for search: terms, scripts written without spaces, where a term occurs.

One set of rules for the full-text index (store/search.py), the lorebook's whole-word keys and
the highlighted snippets of search results, so that what is found, what is matched and what is
highlighted agree:

- A term is a run of letters and digits (what SQLite's unicode61 tokenizer keeps); anything
  else separates terms, so "sister's" is "sister" and "s".
- Japanese, Chinese and Thai are written without spaces between words: a term with one of
  their characters is matched as a substring of the text ("unspaced"). Every other term is
  matched at the start of a word ("light" finds "lighthouse", not "delight").
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

# Scripts written without spaces between words: word boundaries mean nothing in them. Korean
# is not here: it separates words with spaces, and a word-start match finds "학교에" for "학교".
UNSPACED_RANGES = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # half-width Katakana
    (0x20000, 0x3134F),  # CJK extensions B..G
)
# The same ranges as a SQLite GLOB class (SQLite compares code points in GLOB ranges).
UNSPACED_GLOB = "*[" + "".join(f"{chr(low)}-{chr(high)}" for low, high in UNSPACED_RANGES) + "]*"

_LATIN_END = 0x250  # accents are removed from Latin letters only
_TERM = re.compile(r"[^\W_]+")  # letters and digits: unicode61's token characters


def is_unspaced_char(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in UNSPACED_RANGES)


def is_spaced_word_char(char: str) -> bool:
    """A letter or digit of a script that separates words with spaces (where word edges mean
    something)."""
    return (char.isalnum() or char == "_") and not is_unspaced_char(char)


def has_unspaced(text: str) -> bool:
    return any(is_unspaced_char(char) for char in text)


@dataclass(frozen=True)
class Term:
    text: str  # as typed (case kept); matching ignores case
    unspaced: bool  # matched as a substring (Japanese, Chinese, Thai), else at a word start


def split_terms(query: str) -> list[Term]:
    """The query's terms, in order, each once (case-insensitively)."""
    seen: set[str] = set()
    terms = []
    for found in _TERM.finditer(query):
        text = found.group()
        key = text.casefold()
        if key not in seen:
            seen.add(key)
            terms.append(Term(text, has_unspaced(text)))
    return terms


def recall_terms(terms: Sequence[Term]) -> list[Term]:
    """The terms recall looks for (store/search.py) and shows as why a message came back
    (memory/recall.py). Recall matches whole words, not prefixes, and leaves out one-letter
    words (not digits). Japanese and Chinese are split into overlapping pairs of characters
    (most of their words are two characters long: 名前, 東京), any of which counts."""
    out: list[Term] = []
    for term in terms:
        if term.unspaced and len(term.text) > 2:
            out.extend(Term(term.text[i : i + 2], True) for i in range(len(term.text) - 1))
        elif term.unspaced or len(term.text) > 1 or term.text.isdigit():
            out.append(term)  # a lone digit is a specific ("day 3"), a lone letter is not
    unique = {t.text.lower(): t for t in out}
    return list(unique.values())


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
    """Lower case without Latin accents, one character for one (a match's place in the folded
    text is its place in the text), as the index compares ("cafe" finds "café")."""
    lowered = text.lower()
    if len(lowered) != len(text):  # the few characters whose lower case is longer
        lowered = text
    return "".join(
        unicodedata.normalize("NFD", char)[0] if ord(char) < _LATIN_END else char
        for char in lowered
    )


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
