"""Readback in code, not in the model: did the user's names and numbers survive the chapter?

What the user states about themselves is what memory loses first on a small model
(docs/decisions.md D-6). So after a chapter
is written, the names and numbers in the user's lines of its range are looked for in the chapter
and its ledger entries; the misses are named to the chronicler in one retry, and whatever is still
missing after it is stored with the chapter, where the inspector and the audit show it.

Names and numbers are the term module's (kotonia_tui/terms.py): a name is a capitalized word that
is not merely the first word of a sentence (unless the same word is also capitalized inside one);
a number is a run of digits with its separators ("3.50", "14:30"). Scripts without capitals
(Japanese, Chinese, Arabic, ...) give numbers only. A name is kept where the text writes it as
a word with its capital ("told" does not keep "Old", nor "the brass case" "Brass": D-43).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from kotonia_tui.domain import LedgerEntry, Message, Role
from kotonia_tui.sentences import sentences
from kotonia_tui.terms import holds_specific, specifics


def user_specifics(messages: Sequence[Message]) -> list[str]:
    """The names and numbers in the user's lines, in order of first appearance."""
    found: dict[str, None] = {}
    for message in messages:
        if message.role is Role.USER:
            for item in specifics(message.text):
                found.setdefault(item, None)
    return list(found)


def missing(items: Sequence[str], kept: str) -> list[str]:
    """The specifics that do not appear in `kept` (names as words with their capital, accents
    aside; numbers whole, in any digits)."""
    return [item for item in items if not holds_specific(kept, item)]


def quote(sentence: str) -> str:
    """How the ledger writes a sentence quoted from the user's lines (`quoted_lines`); that an
    entry is one is its `source` (LedgerSource.READBACK), never read back from this text."""
    return f'said "{sentence}"'


# A question mark (Latin, full-width, Arabic) closing a sentence, before any closing quotes,
# brackets or action marks.
_ASKS = re.compile(r"[?？؟][\"'”’»」』)\]*\s]*$")


def asks(entry: LedgerEntry) -> bool:
    """An entry that quotes a question the user asked ("Were you the navigator of the Grey
    Heron?"): the readback keeps it for its names and numbers, but it states nothing the user
    holds about themselves."""
    return entry.quotes_user and _ASKS.search(entry.text) is not None


def quoted_lines(messages: Sequence[Message], misses: Sequence[str]) -> list[tuple[Message, str]]:
    """The sentences of the user's lines that hold the specifics a chapter left out, each
    once, in the order of the messages: what the ledger keeps in the user's own words, so a
    name or a number the chronicler dropped is still in memory (a small model drops most of
    them: D-6)."""
    quotes: list[tuple[Message, str]] = []
    left = list(misses)
    for message in messages:
        if message.role is not Role.USER or not left:
            continue
        for sentence in sentences(message.text):
            held = [item for item in left if holds_specific(sentence, item)]
            if sentence and held:
                quotes.append((message, sentence))
                left = [item for item in left if item not in held]
    return quotes
