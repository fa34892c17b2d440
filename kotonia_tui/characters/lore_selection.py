"""Choosing a turn's lorebook entries: which fired, on which keys, and which the budget left out.

A turn matches the card's book and any World Info files attached to the character or the
conversation, and fits what fired into one lore budget. Every entry that fired is reported
(`LoreSelection.fired`, with the keys that matched and whether it was sent), so the memory
inspector can show why an entry is in the prompt, or why it is not.

Matching rules (SillyTavern-compatible where it has a convention)
-----------------------------------------------------------------
- `recent_texts` is ordered oldest to newest. `scan_depth` N scans the last N texts (the book's
  `scan_depth`, or an entry's `extensions.scan_depth`); unset scans all that were given; 0 none.
- Keys are case-insensitive unless the entry sets `case_sensitive: true`.
- Whole-word matching is ON by default (`extensions.match_whole_words`, SillyTavern's field): the
  key "cat" must not fire on "category". It only applies at key edges written in scripts that
  separate words with spaces; Japanese and Chinese keys match as substrings, since those scripts
  have no spaces between words (search_text.py).
- `use_regex: true` (V3) makes every key a regular expression (case flag as above, no whole-word
  rule). A bad pattern is a load error naming the entry, never a crash at match time. A card's
  pattern is untrusted: it runs with the `regex` package's time bound (`REGEX_TIMEOUT_S`), and a
  key that runs past it is turned off for that book (a `RegexGuard` remembers it) and reported
  in `LoreSelection.timed_out`, so one pattern such as `(a|aa)+$` cannot freeze a conversation.
- A `selective` entry with secondary keys also needs them, by SillyTavern's
  `extensions.selectiveLogic`: 0 (the default) any of them, 1 not all of them, 2 none of them,
  3 all of them.
- With `recursive_scanning`, the content of chosen entries is scanned too (an entry can opt out
  with SillyTavern's `extensions.exclude_recursion` / `extensions.prevent_recursion`).
- Budget: constant entries first, then higher `priority`, then lower `insertion_order`, across
  all the books. An entry that does not fit is left out whole (never cut) and reported in
  `LoreSelection.skipped`; smaller entries after it may still fit. A book's own `token_budget`
  bounds its entries too. The chosen entries come back book by book, in `insertion_order`.
- Not applied: SillyTavern's `probability` (an entry that fires is always a candidate: a random
  pick would make the prompt differ from one try to the next) and its per-entry positions and
  depths (keyed lore always goes after the history, where it keeps the prompt cache).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kotonia_tui.characters.lorebook import (
    REGEX_TIMEOUT_S,
    Lorebook,
    LoreEntry,
    compile_key,
    entry_body,
)
from kotonia_tui.terms import is_spaced_word_char

CARD_BOOK = "card"  # the name the card's own book is reported under


@dataclass(frozen=True)
class LoreFiring:
    """One entry that fired this turn."""

    entry: LoreEntry
    book: str  # CARD_BOOK or a World Info file name
    keys: tuple[str, ...]  # the keys that matched, primary first (none for a constant entry)
    sent: bool  # False: left out, over the budget
    tokens: int

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


@dataclass
class RegexGuard:
    """The regex keys of one book that ran past the time bound; they stay off for that book."""

    disabled: set[tuple[str, bool]] = field(default_factory=set)  # (pattern, case_sensitive)
    newly: list[tuple[LoreEntry, str]] = field(default_factory=list)

    def search(self, entry: LoreEntry, key: str, text: str) -> bool:
        flag = (key, entry.is_case_sensitive)
        if flag in self.disabled:
            return False
        try:
            return compile_key(*flag).search(text, timeout=REGEX_TIMEOUT_S) is not None
        except TimeoutError:
            self.disabled.add(flag)
            self.newly.append((entry, key))
            return False


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


@dataclass(frozen=True)
class BookToMatch:
    """A book as one turn matches it."""

    name: str
    book: Lorebook
    include_constant: bool = True
    guard: RegexGuard = field(default_factory=RegexGuard)


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
) -> LoreSelection:
    """`select_entries` over several books sharing one budget."""
    fired: list[tuple[int, int, LoreEntry, tuple[str, ...]]] = []  # book, index, entry, keys
    timed_out: list[tuple[LoreEntry, str]] = []
    for number, to_match in enumerate(books):
        already = len(to_match.guard.newly)
        for index, entry, keys in _matched(to_match, recent_texts):
            fired.append((number, index, entry, keys))
        timed_out += to_match.guard.newly[already:]
    ranked = sorted(
        fired,
        key=lambda item: (not item[2].constant, -(item[2].priority or 0), item[2].insertion_order),
    )
    used = 0
    used_by_book: dict[int, int] = {}
    kept: list[tuple[int, int, LoreEntry]] = []
    skipped: list[LoreEntry] = []
    report: list[LoreFiring] = []
    for number, index, entry, keys in ranked:
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
    return LoreSelection(
        entries=tuple(entry for _, _, entry in kept),
        skipped=tuple(skipped),
        tokens=used,
        timed_out=tuple(timed_out),
        fired=tuple(report),
        budget=budget_tokens,
    )


def _matched(
    to_match: BookToMatch, recent_texts: Sequence[str]
) -> list[tuple[int, LoreEntry, tuple[str, ...]]]:
    """The entries of one book that fire, with the keys that matched."""
    book, guard = to_match.book, to_match.guard
    enabled = [(i, e) for i, e in enumerate(book.entries) if e.enabled and entry_body(e.content)]
    chosen: dict[int, tuple[LoreEntry, tuple[str, ...]]] = {}
    if to_match.include_constant:
        chosen.update((i, (e, ())) for i, e in enabled if e.constant)

    haystacks: dict[int | None, str] = {}

    def haystack(depth: int | None) -> str:
        if depth not in haystacks:
            if depth is None:
                texts = list(recent_texts)
            else:
                texts = list(recent_texts[-depth:]) if depth > 0 else []
            haystacks[depth] = "\n".join(texts)
        return haystacks[depth]

    # Text that recursion adds: contents of entries already chosen (constants always count, so
    # the result does not depend on where the caller puts them).
    recursed = [e.content for _, e in enabled if e.constant and not _prevents_recursion(e)]
    while True:
        found: list[tuple[int, LoreEntry, tuple[str, ...]]] = []
        for index, entry in enabled:
            if index in chosen or entry.constant:
                continue
            depth = entry.scan_depth if entry.scan_depth is not None else book.scan_depth
            texts = [haystack(max(depth, 0) if depth is not None else None)]
            if book.recursive_scanning and not entry.extensions.get("exclude_recursion"):
                texts.extend(recursed)
            keys = _entry_matches(entry, "\n".join(texts), guard)
            if keys is not None:
                found.append((index, entry, keys))
        if not found:
            break
        chosen.update((i, (e, k)) for i, e, k in found)
        if not book.recursive_scanning:
            break
        recursed.extend(e.content for _, e, _ in found if not _prevents_recursion(e))
    return [(index, entry, keys) for index, (entry, keys) in chosen.items()]


def _prevents_recursion(entry: LoreEntry) -> bool:
    return bool(entry.extensions.get("prevent_recursion"))


# SillyTavern's selectiveLogic: how secondary keys combine with the primary match.
AND_ANY, NOT_ALL, NOT_ANY, AND_ALL = 0, 1, 2, 3


def _entry_matches(entry: LoreEntry, text: str, guard: RegexGuard) -> tuple[str, ...] | None:
    """The keys that matched (primary, then secondary), or None when the entry does not fire."""
    primary = _first_match(entry, entry.keys, text, guard) if text else None
    if primary is None:
        return None
    secondary = [k for k in entry.secondary_keys if k.strip()]
    if not entry.selective or not secondary:
        return (primary,)
    logic = entry.extensions.get("selectiveLogic", AND_ANY)
    matched = [k for k in secondary if _first_match(entry, [k], text, guard) is not None]
    if logic == NOT_ALL:
        return (primary,) if len(matched) < len(secondary) else None
    if logic == NOT_ANY:
        return (primary,) if not matched else None
    if logic == AND_ALL:
        return (primary, *matched) if len(matched) == len(secondary) else None
    return (primary, matched[0]) if matched else None


def _first_match(entry: LoreEntry, keys: Sequence[str], text: str, guard: RegexGuard) -> str | None:
    for key in keys:
        if not key.strip():
            continue  # an empty key would match every message
        if entry.use_regex:
            if guard.search(entry, key, text):
                return key
        elif _literal_matches(key, text, entry.is_case_sensitive, entry.match_whole_words):
            return key
    return None


def _literal_matches(key: str, text: str, case_sensitive: bool, whole_words: bool) -> bool:
    if not case_sensitive:
        key, text = key.lower(), text.lower()
    check_start = whole_words and is_spaced_word_char(key[0])
    check_end = whole_words and is_spaced_word_char(key[-1])
    start = text.find(key)
    while start != -1:
        end = start + len(key)
        before_ok = not check_start or start == 0 or not is_spaced_word_char(text[start - 1])
        after_ok = not check_end or end == len(text) or not is_spaced_word_char(text[end])
        if before_ok and after_ok:
            return True
        start = text.find(key, start + 1)
    return False
