"""Readback in code, not in the model: did the user's names and numbers survive the chapter?

What the user states about themselves is what memory loses first on a small model (a 40-turn run
ended with the user's name, sister, allergy, a date and a price in no chapter). So after a chapter
is written, the names and numbers in the user's lines of its range are looked for in the chapter
and its ledger entries; the misses are named to the chronicler in one retry, and whatever is still
missing after it is stored with the chapter, where the inspector and the audit show it.

A name here is a capitalized word that is not merely the first word of a sentence (unless the same
word is also capitalized inside one); a number is a run of digits with its separators ("3.50",
"14:30"). Scripts without capitals (Japanese, Chinese) give numbers only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from kotonia_tui.domain import Message, Role

_NUMBER = re.compile(r"\d+(?:[.,:/]\d+)*")
_WORD = re.compile(r"[^\W\d_][\w'’-]*")
_SENTENCE_END = re.compile(r"[.!?。！？:;\"“”*(\[\n]\s*$")
# Capitalized words that are names far less often than not, at any position.
_NOT_NAMES = frozenset({"i", "i'm", "i've", "i'll", "i'd", "ok", "okay", "oh", "yes", "no"})


def _names(text: str) -> list[tuple[int, str]]:
    capital_inside: set[str] = set()
    candidates: list[tuple[int, str, bool]] = []
    for match in _WORD.finditer(text):
        word = match.group(0).strip("'’-")
        if not word or not word[0].isupper() or word.casefold() in _NOT_NAMES:
            continue
        before = text[: match.start()]
        starts_sentence = not before.strip() or bool(_SENTENCE_END.search(before))
        if not starts_sentence:
            capital_inside.add(word)
        candidates.append((match.start(), word, starts_sentence))
    return [(at, w) for at, w, first in candidates if not first or w in capital_inside]


def user_specifics(messages: Sequence[Message]) -> list[str]:
    """The names and numbers in the user's lines, in order of first appearance."""
    found: dict[str, None] = {}
    for message in messages:
        if message.role is not Role.USER:
            continue
        numbers = [(m.start(), m.group(0)) for m in _NUMBER.finditer(message.text)]
        for _, item in sorted(numbers + _names(message.text)):
            found.setdefault(item, None)
    return list(found)


def missing(specifics: Sequence[str], kept: str) -> list[str]:
    """The specifics that do not appear in `kept` (names regardless of case; numbers whole)."""
    haystack = kept.casefold()
    misses = []
    for item in specifics:
        if item[0].isdigit():
            if not re.search(rf"(?<![\d.,]){re.escape(item)}(?![\d])", kept):
                misses.append(item)
        elif item.casefold() not in haystack:
            misses.append(item)
    return misses
