"""Choosing a turn's lorebook entries: which fired, on which keys, and which the budget left out.

A turn matches the card's book and any World Info files attached to the character or the
conversation, and fits what fired into one lore budget. Every entry that fired is reported
(`LoreSelection.fired`, with the keys that matched and whether it was sent), so the memory
inspector can show why an entry is in the prompt, or why it is not.

Matching rules (SillyTavern-compatible where it has a convention)
-----------------------------------------------------------------
- `recent_texts` is ordered oldest to newest. `scan_depth` N scans the last N texts (the book's
  `scan_depth`, or an entry's `extensions.scan_depth`); unset scans all that were given; 0 none.
- Keys are case-insensitive unless the entry sets `case_sensitive: true` (SillyTavern's
  `extensions.case_sensitive` on an entry it wrote).
- Whole-word matching is ON by default (`extensions.match_whole_words`, SillyTavern's field): the
  key "cat" must not fire on "category". It only applies at key edges written in scripts that
  separate words with spaces; Japanese and Chinese keys match as substrings, since those scripts
  have no spaces between words (search_text.py).
- `use_regex: true` (V3) makes every key a regular expression (case flag as above, no whole-word
  rule), except on an entry SillyTavern wrote, whose keys stay text (`lorebook.py`: it writes
  the flag on every entry it exports). A bad pattern is a load error naming the entry, never a
  crash at match time. A card's
  pattern is untrusted: it runs with the `regex` package's time bound (`REGEX_TIMEOUT_S`), and a
  key that runs past it is turned off for that book (a `RegexGuard` remembers it) and reported
  in `LoreSelection.timed_out`, so one pattern such as `(a|aa)+$` cannot freeze a conversation.
- The whole step is bounded too (`lore_scan.py`: `LORE_SCAN_S` of time and `MAX_LORE_SCANS`
  entry checks across all the books and recursion rounds, then `LORE_COUNT_S` to count
  tokens): many slow keys or a long recursive chain stop the scan where it is, and
  `LoreSelection.cut` says why and what was not checked.
- A `selective` entry with secondary keys also needs them, by SillyTavern's
  `extensions.selectiveLogic`: 0 (the default) any of them, 1 not all of them, 2 none of them,
  3 all of them.
- With `recursive_scanning`, the content of chosen entries is scanned too (an entry can opt out
  with SillyTavern's `extensions.exclude_recursion` / `extensions.prevent_recursion`).
- Budget: constant entries first, then higher `priority`, then the entries whose key is in
  the newest message (the one just sent before one a few messages back: what the user asks
  about now), then lower `insertion_order`, across all the books. An entry that does not fit
  is left out whole (never cut) and reported in `LoreSelection.skipped`; smaller entries after
  it may still fit. A book's own `token_budget` bounds its entries too. The chosen entries
  come back book by book, in `insertion_order`.
- Not applied: SillyTavern's `probability` (an entry that fires is always a candidate: a random
  pick would make the prompt differ from one try to the next) and its per-entry positions and
  depths (keyed lore always goes after the history, where it keeps the prompt cache).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kotonia_tui.characters.lore_scan import (
    LORE_COUNT_S,
    BookToMatch,
    LoreCut,
    RegexGuard,
    ScanBounds,
    newest_match,
    scan_book,
)
from kotonia_tui.characters.lorebook import REGEX_TIMEOUT_S, Lorebook, LoreEntry, entry_body

CARD_BOOK = "card"  # the name the card's own book is reported under


@dataclass(frozen=True)
class LoreFiring:
    """One entry that fired this turn."""

    entry: LoreEntry
    book: str  # CARD_BOOK or a World Info file name
    keys: tuple[str, ...]  # the keys that matched, primary first (none for a constant entry)
    sent: bool  # False: left out (`left_out` says why)
    tokens: int
    left_out: str = "over the budget"  # why an entry that fired was not sent

    @property
    def label(self) -> str:
        entry = self.entry
        if entry.name or entry.comment:
            return entry.name or entry.comment or ""
        if entry.keys:
            return entry.keys[0]
        body = " ".join(entry_body(entry.content).split())
        return body if len(body) <= 30 else body[:29] + "…"


@dataclass(frozen=True)
class LoreSelection:
    """The entries to send (book by book, in insertion order), and every entry that fired."""

    entries: tuple[LoreEntry, ...] = ()
    skipped: tuple[LoreEntry, ...] = ()
    tokens: int = 0  # tokens of the chosen entries' content, as counted by `count_tokens`
    timed_out: tuple[tuple[LoreEntry, str], ...] = ()  # (entry, key) turned off this time
    fired: tuple[LoreFiring, ...] = ()  # in the order they were ranked for the budget
    budget: int = 0
    cut: LoreCut | None = None  # the step stopped at its bound before it was done


def timed_out_note(card_name: str, entry: LoreEntry, key: str) -> str:
    """The warning said once when a key is turned off."""
    shown = key if len(key) <= 40 else key[:39] + "…"
    label = (
        f" (entry {entry.name or entry.comment or entry.id})"
        if entry.name or entry.comment or entry.id is not None
        else ""
    )
    return (
        f"lorebook key {shown!r}{label} of {card_name} took more than {REGEX_TIMEOUT_S:g} s "
        "to match and is turned off for this card"
    )


def select_entries(
    book: Lorebook | None,
    recent_texts: Sequence[str],
    count_tokens: Callable[[str], int],
    budget_tokens: int,
    *,
    include_constant: bool = True,
    guard: RegexGuard | None = None,
) -> LoreSelection:
    """Choose the entries of one book that apply to the recent messages, within the budget.

    `recent_texts` are message texts, oldest first, the new user message last. `count_tokens` is
    the engine's exact counter; `budget_tokens` the lore budget of the prompt. `guard` keeps
    the card's timed-out regex keys between turns (a new one is used when none is given).
    """
    if book is None:
        return LoreSelection(budget=budget_tokens)
    to_match = BookToMatch(CARD_BOOK, book, include_constant, guard or RegexGuard())
    return select_from_books([to_match], recent_texts, count_tokens, budget_tokens)


def select_from_books(
    books: Sequence[BookToMatch],
    recent_texts: Sequence[str],
    count_tokens: Callable[[str], int],
    budget_tokens: int,
    bounds: ScanBounds | None = None,
) -> LoreSelection:
    """`select_entries` over several books sharing one budget, and one bound on the step's time
    and entry checks (`bounds`, the defaults of `lore_scan` when not given)."""
    bounds = bounds or ScanBounds()
    fired: list[tuple[int, int, LoreEntry, tuple[str, ...]]] = []  # book, index, entry, keys
    timed_out: list[tuple[LoreEntry, str]] = []
    unchecked: list[tuple[str, int]] = []
    rounds = 0
    for number, to_match in enumerate(books):
        already = len(to_match.guard.newly)
        scan = scan_book(to_match, recent_texts, bounds)
        fired.extend((number, index, entry, keys) for index, entry, keys in scan.fired)
        timed_out += to_match.guard.newly[already:]
        if scan.unchecked:
            unchecked.append((to_match.name, scan.unchecked))
        rounds = max(rounds, scan.rounds)
    # How recent the message an entry fired on is; the key is looked for again in each text,
    # newest first, within the same bound (an entry found by recursion counts as the oldest).
    age = {
        (number, index): newest_match(entry, keys[0], recent_texts, books[number].guard, bounds)
        if keys
        else 0
        for number, index, entry, keys in fired
    }
    ranked = sorted(
        fired,
        key=lambda item: (
            not item[2].constant,
            -(item[2].priority or 0),
            age[item[0], item[1]],
            item[2].insertion_order,
        ),
    )
    used = 0
    used_by_book: dict[int, int] = {}
    kept: list[tuple[int, int, LoreEntry]] = []
    skipped: list[LoreEntry] = []
    report: list[LoreFiring] = []
    uncounted = 0
    counting_until = time.monotonic() + LORE_COUNT_S
    for number, index, entry, keys in ranked:
        if time.monotonic() > counting_until:
            # Counting is part of the step (a server counts over HTTP): past its bound, the
            # rest is reported as fired and not sent, never silently dropped.
            bounds.stopped = bounds.stopped or f"counting took more than {LORE_COUNT_S:g} s"
            uncounted += 1
            skipped.append(entry)
            report.append(
                LoreFiring(entry, books[number].name, keys, False, 0, "not counted (time)")
            )
            continue
        cost = count_tokens(entry_body(entry.content))
        book = books[number].book
        book_used = used_by_book.get(number, 0)
        fits = used + cost <= budget_tokens and (
            book.token_budget is None or book_used + cost <= book.token_budget
        )
        if fits:
            kept.append((number, index, entry))
            used += cost
            used_by_book[number] = book_used + cost
        else:
            skipped.append(entry)
        report.append(LoreFiring(entry, books[number].name, keys, fits, cost))
    kept.sort(key=lambda item: (item[0], item[2].insertion_order, item[1]))
    cut = None
    if bounds.stopped is not None:
        cut = LoreCut(bounds.stopped, tuple(unchecked), rounds if unchecked else 0, uncounted)
    return LoreSelection(
        entries=tuple(entry for _, _, entry in kept),
        skipped=tuple(skipped),
        tokens=used,
        timed_out=tuple(timed_out),
        fired=tuple(report),
        budget=budget_tokens,
        cut=cut,
    )


__all__ = [
    "CARD_BOOK",
    "BookToMatch",
    "LoreCut",
    "LoreFiring",
    "LoreSelection",
    "RegexGuard",
    "ScanBounds",
    "select_entries",
    "select_from_books",
]
