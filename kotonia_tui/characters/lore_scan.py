"""Scanning a turn's text for lorebook keys, within one bound for the whole lore step.

A card's lorebook is untrusted, and each entry within the card bounds can still multiply the
work of a turn: a regex key runs with a per-key time bound (`REGEX_TIMEOUT_S`), but 400 such
keys are 400 bounds; with recursive scanning, a chain of 3,000 entries each naming the next is
3,000 rounds over a growing text. So the step as a whole (every book of the turn, every
recursion round, every key) has one budget: `LORE_SCAN_S` of time and `MAX_LORE_SCANS` entry
checks, then `LORE_COUNT_S` to weigh what fired against the lore budget (`lore_selection`).
When either runs out the scan stops where it is: the entries that fired so far are kept, and
a `LoreCut` says why the scan stopped and what it did not check, for the inspector and the
log. Nothing is chosen at random: the books are scanned in their order, and in each
round the entries with plain keys before those with regex keys (which may be slow).

The time is the wall clock (what the user waits); the `regex` package's per-key bound counts
the CPU time of the search, so on a busy machine one key may take longer than its bound, and
the step overshoots its bound by at most one key's share.

Matching rules: `characters/lore_selection.py`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from kotonia_tui.characters.lorebook import (
    REGEX_TIMEOUT_S,
    Lorebook,
    LoreEntry,
    compile_key,
    entry_body,
)
from kotonia_tui.terms import is_spaced_word_char

# A turn waits for its lore before the model starts: three seconds in all is a pause a user
# notices but forgives, and an ordinary book (hundreds of plain keys) takes milliseconds.
LORE_SCAN_S = 2.0  # finding the entries that fire
LORE_COUNT_S = 1.0  # counting their tokens for the budget (a server counts over HTTP)
# Entry checks per turn (a recursion round checks every entry not yet chosen again): five full
# rounds of the largest book a card may have (MAX_LORE_ENTRIES, 10,000).
MAX_LORE_SCANS = 50_000


@dataclass
class ScanBounds:
    """What is left of one lore step's time and entry checks."""

    seconds: float = LORE_SCAN_S
    scans: int = MAX_LORE_SCANS
    started: float = field(default_factory=time.monotonic)
    used: int = 0
    stopped: str | None = None  # why the step stopped early, in words ("it ran for 2 s")

    def remaining(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def take(self) -> bool:
        """Whether one more entry may be checked (counted if so)."""
        if self.stopped is not None:
            return False
        if self.used >= self.scans:
            self.stopped = f"it had checked {self.scans:,} entries"
            return False
        if self.remaining() <= 0:
            self.out_of_time()
            return False
        self.used += 1
        return True

    def out_of_time(self) -> None:
        self.stopped = self.stopped or f"it had run for {self.seconds:g} s"


@dataclass(frozen=True)
class LoreCut:
    """A lore step that stopped before it was done: why, and what it left out."""

    reason: str  # "it had run for 2 s", "it had checked 50,000 entries"
    unchecked: tuple[tuple[str, int], ...]  # (book, entries not checked against all the text)
    rounds: int = 0  # recursion rounds completed before the stop
    uncounted: int = 0  # entries that fired but were not weighed against the budget

    def text(self) -> str:
        parts = [f"{count:,} entries of {book} not checked" for book, count in self.unchecked]
        if self.rounds:
            parts.append(f"recursion stopped after {self.rounds:,} rounds")
        if self.uncounted:
            parts.append(f"{self.uncounted:,} entries that fired were not counted or sent")
        left = "; ".join(parts) if parts else "nothing was left out"
        return f"the lorebook scan stopped because {self.reason}: {left}"


@dataclass
class RegexGuard:
    """The regex keys of one book that ran past the time bound; they stay off for that book."""

    disabled: set[tuple[str, bool]] = field(default_factory=set)  # (pattern, case_sensitive)
    newly: list[tuple[LoreEntry, str]] = field(default_factory=list)

    def search(
        self, entry: LoreEntry, key: str, text: str, bounds: ScanBounds | None = None
    ) -> bool:
        flag = (key, entry.is_case_sensitive)
        if flag in self.disabled:
            return False
        timeout = REGEX_TIMEOUT_S
        if bounds is not None:
            timeout = min(timeout, max(bounds.remaining(), 0.0))
            if timeout <= 0:
                bounds.out_of_time()
                return False
        try:
            return compile_key(*flag).search(text, timeout=timeout) is not None
        except TimeoutError:
            if timeout < REGEX_TIMEOUT_S and bounds is not None:
                bounds.out_of_time()  # the step's time ran out, not the key's own bound
                return False
            self.disabled.add(flag)
            self.newly.append((entry, key))
            return False


@dataclass(frozen=True)
class BookToMatch:
    """A book as one turn matches it."""

    name: str
    book: Lorebook
    include_constant: bool = True
    guard: RegexGuard = field(default_factory=RegexGuard)


@dataclass(frozen=True)
class BookScan:
    """What one book's scan found: the entries that fired (index, entry, keys matched)."""

    fired: list[tuple[int, LoreEntry, tuple[str, ...]]]
    unchecked: int = 0  # entries the scan stopped before checking (in its last round)
    rounds: int = 0  # recursion rounds completed, when the scan stopped during recursion


class _Text:
    """A haystack and, when a case-insensitive key first needs it, its lower-case form."""

    def __init__(self, raw: str) -> None:
        self.raw = raw
        self._lower: str | None = None

    @property
    def lower(self) -> str:
        if self._lower is None:
            self._lower = self.raw.lower()
        return self._lower


def scan_book(to_match: BookToMatch, recent_texts: Sequence[str], bounds: ScanBounds) -> BookScan:
    """The entries of one book that fire on the recent texts (and, with recursive scanning,
    on the content of entries that fired), as far as `bounds` lets the scan go."""
    book, guard = to_match.book, to_match.guard
    enabled = [(i, e) for i, e in enumerate(book.entries) if e.enabled and entry_body(e.content)]
    chosen: dict[int, tuple[LoreEntry, tuple[str, ...]]] = {}
    if to_match.include_constant:
        chosen.update((i, (e, ())) for i, e in enabled if e.constant)

    bases: dict[int | None, str] = {}

    def base(depth: int | None) -> str:
        if depth not in bases:
            if depth is None:
                texts = list(recent_texts)
            else:
                texts = list(recent_texts[-depth:]) if depth > 0 else []
            bases[depth] = "\n".join(texts)
        return bases[depth]

    # Text that recursion adds: contents of entries already chosen (constants always count, so
    # the result does not depend on where the caller puts them).
    recursed = [e.content for _, e in enabled if e.constant and not _prevents_recursion(e)]
    rounds = 0
    while True:
        # One haystack per scan depth and round (built once, not once per entry).
        plain: dict[int | None, _Text] = {}
        widened: dict[int | None, _Text] = {}
        added = "\n".join(recursed)
        found: list[tuple[int, LoreEntry, tuple[str, ...]]] = []
        # Plain keys first: they take microseconds, so a bound reached among slow regex keys
        # leaves out as little as it can (which entries fire does not depend on the order).
        waiting = sorted(
            ((i, e) for i, e in enabled if i not in chosen and not e.constant),
            key=lambda item: item[1].keys_are_regex,
        )
        for checked, (index, entry) in enumerate(waiting):
            if not bounds.take():
                chosen.update((i, (e, k)) for i, e, k in found)
                return BookScan(_listed(chosen), len(waiting) - checked, rounds)
            depth = entry.scan_depth if entry.scan_depth is not None else book.scan_depth
            depth = max(depth, 0) if depth is not None else None
            if book.recursive_scanning and added and not entry.extensions.get("exclude_recursion"):
                if depth not in widened:
                    widened[depth] = _Text(f"{base(depth)}\n{added}")
                text = widened[depth]
            else:
                if depth not in plain:
                    plain[depth] = _Text(base(depth))
                text = plain[depth]
            keys = entry_matches(entry, text, guard, bounds)
            if keys is not None:
                found.append((index, entry, keys))
            elif bounds.stopped is not None:
                # The time ran out inside this entry's keys: it was not fully checked.
                chosen.update((i, (e, k)) for i, e, k in found)
                return BookScan(_listed(chosen), len(waiting) - checked, rounds)
        if not found:
            break
        chosen.update((i, (e, k)) for i, e, k in found)
        if not book.recursive_scanning:
            break
        rounds += 1
        recursed.extend(e.content for _, e, _ in found if not _prevents_recursion(e))
    return BookScan(_listed(chosen))


def newest_match(
    entry: LoreEntry, key: str, recent_texts: Sequence[str], guard: RegexGuard, bounds: ScanBounds
) -> int:
    """How far back the newest of `recent_texts` holding `key` is: 0 for the newest text,
    `len(recent_texts)` when none holds it (the entry fired on recursed lore)."""
    for age, text in enumerate(reversed(recent_texts)):
        if _first_match(entry, [key], _Text(text), guard, bounds) is not None:
            return age
        if bounds.stopped is not None:
            break
    return len(recent_texts)


def _listed(
    chosen: dict[int, tuple[LoreEntry, tuple[str, ...]]],
) -> list[tuple[int, LoreEntry, tuple[str, ...]]]:
    return [(index, entry, keys) for index, (entry, keys) in chosen.items()]


def _prevents_recursion(entry: LoreEntry) -> bool:
    return bool(entry.extensions.get("prevent_recursion"))


# SillyTavern's selectiveLogic: how secondary keys combine with the primary match.
AND_ANY, NOT_ALL, NOT_ANY, AND_ALL = 0, 1, 2, 3


def entry_matches(
    entry: LoreEntry, text: _Text, guard: RegexGuard, bounds: ScanBounds
) -> tuple[str, ...] | None:
    """The keys that matched (primary, then secondary), or None when the entry does not fire
    (or the step's time ran out while its keys were tried: `bounds.stopped` says so)."""
    primary = _first_match(entry, entry.keys, text, guard, bounds) if text.raw else None
    if primary is None:
        return None
    secondary = [k for k in entry.secondary_keys if k.strip()]
    if not entry.selective or not secondary:
        return (primary,)
    logic = entry.extensions.get("selectiveLogic", AND_ANY)
    matched = [k for k in secondary if _first_match(entry, [k], text, guard, bounds) is not None]
    if bounds.stopped is not None:
        return None  # not every secondary key was tried: the entry's logic cannot be decided
    if logic == NOT_ALL:
        return (primary,) if len(matched) < len(secondary) else None
    if logic == NOT_ANY:
        return (primary,) if not matched else None
    if logic == AND_ALL:
        return (primary, *matched) if len(matched) == len(secondary) else None
    return (primary, matched[0]) if matched else None


def _first_match(
    entry: LoreEntry, keys: Sequence[str], text: _Text, guard: RegexGuard, bounds: ScanBounds
) -> str | None:
    for key in keys:
        if bounds.stopped is not None:
            return None
        if not key.strip():
            continue  # an empty key would match every message
        if entry.keys_are_regex:
            if guard.search(entry, key, text.raw, bounds):
                return key
        elif _literal_matches(key, text, entry.is_case_sensitive, entry.match_whole_words):
            return key
    return None


def _literal_matches(key: str, text: _Text, case_sensitive: bool, whole_words: bool) -> bool:
    haystack = text.raw if case_sensitive else text.lower
    if not case_sensitive:
        key = key.lower()
    check_start = whole_words and is_spaced_word_char(key[0])
    check_end = whole_words and is_spaced_word_char(key[-1])
    start = haystack.find(key)
    while start != -1:
        end = start + len(key)
        before_ok = not check_start or start == 0 or not is_spaced_word_char(haystack[start - 1])
        after_ok = not check_end or end == len(haystack) or not is_spaced_word_char(haystack[end])
        if before_ok and after_ok:
            return True
        start = haystack.find(key, start + 1)
    return False
