"""Lorebooks (a card's `character_book`): the entries, how they are read, chosen and rendered.

Where lore goes in the prompt, and why
--------------------------------------
Keyed entries depend on the recent messages, so the set chosen can change on every turn. The
prompt assembler places `render_lore(selection.entries)` AFTER the verbatim history, just before
the new user message (the same place as `post_history_instructions`). Anything placed before the
history that changes with the recent messages would change the stable prompt prefix and force the
engine to re-evaluate the whole history (the KV cache only survives an unchanged prefix).
Constant entries never change, so `render_setup` puts them in the system text by default, and
then the assembler calls `select_entries(..., include_constant=False)` so they are not sent twice.

Matching rules (decided here; SillyTavern-compatible where it has a convention)
-------------------------------------------------------------------------------
- `recent_texts` is ordered oldest to newest. `scan_depth` N scans the last N texts (the book's
  `scan_depth`, or an entry's `extensions.scan_depth`); unset scans all that were given; 0 none.
- Keys are case-insensitive unless the entry sets `case_sensitive: true`.
- Whole-word matching is ON by default (`extensions.match_whole_words`, SillyTavern's field): the
  key "cat" must not fire on "category". It only applies at key edges written in scripts that
  separate words with spaces; Japanese and Chinese keys match as substrings, since those scripts
  have no spaces between words.
- `use_regex: true` (V3) makes every key a regular expression (case flag as above, no whole-word
  rule). A bad pattern is a load error naming the entry, never a crash at match time. A card's
  pattern is untrusted: it runs with the `regex` package's time bound (`REGEX_TIMEOUT_S`), and a
  key that runs past it is turned off for that card (a `RegexGuard` remembers it) and reported
  in `LoreSelection.timed_out`, so one pattern such as `(a|aa)+$` cannot freeze a conversation.
- A `selective` entry with secondary keys also needs one secondary key to match.
- With `recursive_scanning`, the content of chosen entries is scanned too (an entry can opt out
  with SillyTavern's `extensions.exclude_recursion` / `extensions.prevent_recursion`).
- Budget: constant entries first, then higher `priority`, then lower `insertion_order`. An entry
  that does not fit is skipped whole (never cut) and reported in `LoreSelection.skipped`; smaller
  entries after it may still fit. The chosen entries come back in `insertion_order`.
- Lines at the start of an entry's content that begin with `@@` are V3 decorators; they are not
  interpreted and are never sent to the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

import regex
from pydantic import BaseModel, Field, model_validator

from kotonia_tui.characters.errors import FieldError
from kotonia_tui.characters.json_fields import ObjectReader
from kotonia_tui.characters.limits import MAX_LORE_ENTRIES, MAX_TEXT_CHARS
from kotonia_tui.characters.macros import apply_macros
from kotonia_tui.search_text import is_spaced_word_char

DEFAULT_MATCH_WHOLE_WORDS = True
REGEX_TIMEOUT_S = 0.25  # one key against the scanned text; ordinary patterns take microseconds

_ENTRY_FIELDS = {
    "keys",
    "secondary_keys",
    "selective",
    "content",
    "enabled",
    "insertion_order",
    "case_sensitive",
    "constant",
    "priority",
    "position",
    "name",
    "comment",
    "id",
    "use_regex",
    "extensions",
}
_BOOK_FIELDS = {
    "name",
    "description",
    "scan_depth",
    "token_budget",
    "recursive_scanning",
    "extensions",
    "entries",
}


class LoreEntry(BaseModel):
    """One lorebook entry (V2 `character_book.entries[]`, plus V3 `use_regex`)."""

    keys: list[str] = Field(default_factory=list)
    secondary_keys: list[str] = Field(default_factory=list)
    selective: bool = False
    content: str = ""
    enabled: bool = True
    insertion_order: int = 0
    case_sensitive: bool | None = None
    constant: bool = False
    priority: int | None = None
    position: str | None = None  # "before_char" / "after_char"; see the module docstring
    name: str | None = None
    comment: str | None = None
    id: int | str | None = None
    use_regex: bool = False
    extensions: dict[str, Any] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)  # unknown fields, kept for round trips

    @model_validator(mode="after")
    def _regexes_compile(self) -> LoreEntry:
        if self.use_regex:
            for key in (*self.keys, *self.secondary_keys):
                try:
                    _compile(key, self.is_case_sensitive)
                except regex.error as exc:
                    raise ValueError(f"not a valid regular expression {key!r} ({exc})") from exc
        return self

    @property
    def is_case_sensitive(self) -> bool:
        return bool(self.case_sensitive)

    @property
    def match_whole_words(self) -> bool:
        value = self.extensions.get("match_whole_words")
        return value if isinstance(value, bool) else DEFAULT_MATCH_WHOLE_WORDS

    @property
    def scan_depth(self) -> int | None:
        value = self.extensions.get("scan_depth")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def to_json_dict(self, version: Literal["v2", "v3"] = "v3") -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out.update(
            keys=list(self.keys),
            content=self.content,
            extensions=dict(self.extensions),
            enabled=self.enabled,
            insertion_order=self.insertion_order,
            selective=self.selective,
            secondary_keys=list(self.secondary_keys),
            constant=self.constant,
        )
        if version == "v3" or self.use_regex:
            out["use_regex"] = self.use_regex
        optional = {
            "case_sensitive": self.case_sensitive,
            "priority": self.priority,
            "position": self.position,
            "name": self.name,
            "comment": self.comment,
            "id": self.id,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        return out


class Lorebook(BaseModel):
    """A card's `character_book`."""

    name: str | None = None
    description: str | None = None
    scan_depth: int | None = None
    token_budget: int | None = None
    recursive_scanning: bool = False
    extensions: dict[str, Any] = Field(default_factory=dict)
    entries: list[LoreEntry] = Field(default_factory=list)
    extra: dict[str, Any] = Field(default_factory=dict)

    def to_json_dict(self, version: Literal["v2", "v3"] = "v3") -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out.update(
            extensions=dict(self.extensions),
            entries=[entry.to_json_dict(version) for entry in self.entries],
            recursive_scanning=self.recursive_scanning,
        )
        optional = {
            "name": self.name,
            "description": self.description,
            "scan_depth": self.scan_depth,
            "token_budget": self.token_budget,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        return out


def parse_lorebook(obj: dict[str, Any], prefix: str) -> Lorebook:
    """Read a `character_book` object; a wrong field raises `FieldError` naming its path."""
    book = ObjectReader(obj, prefix)
    raw_entries = book.objects("entries")
    if len(raw_entries) > MAX_LORE_ENTRIES:
        raise FieldError(
            book.path("entries"),
            f"has {len(raw_entries):,} entries (a lorebook may have {MAX_LORE_ENTRIES:,})",
        )
    entries = [
        _parse_entry(raw, f"{book.path('entries')}[{index}]")
        for index, raw in enumerate(raw_entries)
    ]
    return Lorebook(
        name=book.optional_string("name"),
        description=book.optional_string("description"),
        scan_depth=book.optional_integer("scan_depth"),
        token_budget=book.optional_integer("token_budget"),
        recursive_scanning=book.boolean("recursive_scanning", False),
        extensions=book.object("extensions"),
        entries=entries,
        extra=book.unknown(_BOOK_FIELDS),
    )


def _parse_entry(obj: dict[str, Any], prefix: str) -> LoreEntry:
    entry = ObjectReader(obj, prefix)
    keys = entry.strings("keys")
    secondary = entry.strings("secondary_keys")
    use_regex = entry.boolean("use_regex", False)
    case_sensitive = entry.optional_boolean("case_sensitive")
    if use_regex:
        for field, values in (("keys", keys), ("secondary_keys", secondary)):
            for index, key in enumerate(values):
                try:
                    _compile(key, bool(case_sensitive))
                except regex.error as exc:
                    raise FieldError(
                        f"{entry.path(field)}[{index}]",
                        f"not a valid regular expression {key!r} ({exc})",
                    ) from exc
    content = entry.string("content")
    if len(content) > MAX_TEXT_CHARS:
        raise FieldError(
            entry.path("content"),
            f"is {len(content):,} characters long (an entry may have {MAX_TEXT_CHARS:,})",
        )
    return LoreEntry(
        keys=keys,
        secondary_keys=secondary,
        selective=entry.boolean("selective", False),
        content=content,
        enabled=entry.boolean("enabled", True),
        insertion_order=entry.integer("insertion_order", 0),
        case_sensitive=case_sensitive,
        constant=entry.boolean("constant", False),
        priority=entry.optional_integer("priority"),
        position=entry.optional_string("position"),
        name=entry.optional_string("name"),
        comment=entry.optional_string("comment"),
        id=entry.int_or_string("id"),
        use_regex=use_regex,
        extensions=entry.object("extensions"),
        extra=entry.unknown(_ENTRY_FIELDS),
    )


@dataclass(frozen=True)
class LoreSelection:
    """The entries to send (in insertion order) and the matched ones the budget left out."""

    entries: tuple[LoreEntry, ...] = ()
    skipped: tuple[LoreEntry, ...] = ()
    tokens: int = 0  # tokens of the chosen entries' content, as counted by `count_tokens`
    timed_out: tuple[tuple[LoreEntry, str], ...] = ()  # (entry, key) turned off this time


@dataclass
class RegexGuard:
    """The regex keys of one card that ran past the time bound; they stay off for that card."""

    disabled: set[tuple[str, bool]] = field(default_factory=set)  # (pattern, case_sensitive)
    newly: list[tuple[LoreEntry, str]] = field(default_factory=list)

    def search(self, entry: LoreEntry, key: str, text: str) -> bool:
        flag = (key, entry.is_case_sensitive)
        if flag in self.disabled:
            return False
        try:
            return _compile(*flag).search(text, timeout=REGEX_TIMEOUT_S) is not None
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


def select_entries(
    book: Lorebook | None,
    recent_texts: Sequence[str],
    count_tokens: Callable[[str], int],
    budget_tokens: int,
    *,
    include_constant: bool = True,
    guard: RegexGuard | None = None,
) -> LoreSelection:
    """Choose the entries that apply to the recent messages, within the token budget.

    `recent_texts` are message texts, oldest first, the new user message last. `count_tokens` is
    the engine's exact counter; `budget_tokens` the lore budget of the prompt. `guard` keeps
    the card's timed-out regex keys between turns (a new one is used when none is given).
    """
    if book is None:
        return LoreSelection()
    guard = guard if guard is not None else RegexGuard()
    already = len(guard.newly)
    enabled = [(i, e) for i, e in enumerate(book.entries) if e.enabled and _body(e.content)]
    chosen: dict[int, LoreEntry] = {}
    if include_constant:
        chosen.update((i, e) for i, e in enabled if e.constant)

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
        found: list[tuple[int, LoreEntry]] = []
        for index, entry in enabled:
            if index in chosen or entry.constant:
                continue
            depth = entry.scan_depth if entry.scan_depth is not None else book.scan_depth
            texts = [haystack(max(depth, 0) if depth is not None else None)]
            if book.recursive_scanning and not entry.extensions.get("exclude_recursion"):
                texts.extend(recursed)
            if _entry_matches(entry, "\n".join(texts), guard):
                found.append((index, entry))
        if not found:
            break
        chosen.update(found)
        if not book.recursive_scanning:
            break
        recursed.extend(e.content for _, e in found if not _prevents_recursion(e))

    budget = budget_tokens if book.token_budget is None else min(budget_tokens, book.token_budget)
    ranked = sorted(
        chosen.items(),
        key=lambda item: (not item[1].constant, -(item[1].priority or 0), item[1].insertion_order),
    )
    kept: list[tuple[int, LoreEntry]] = []
    skipped: list[LoreEntry] = []
    used = 0
    for index, entry in ranked:
        cost = count_tokens(_body(entry.content))
        if used + cost <= budget:
            kept.append((index, entry))
            used += cost
        else:
            skipped.append(entry)
    kept.sort(key=lambda item: (item[1].insertion_order, item[0]))
    timed_out = tuple(guard.newly[already:])
    return LoreSelection(tuple(e for _, e in kept), tuple(skipped), used, timed_out)


def render_lore(
    entries: Sequence[LoreEntry], *, char: str | None = None, user: str | None = None
) -> str:
    """The entries' text as the model sees it; macros are applied when both names are given."""
    parts = [_body(entry.content) for entry in entries]
    text = "\n\n".join(part for part in parts if part)
    if char is not None and user is not None:
        text = apply_macros(text, char=char, user=user)
    return text


def _prevents_recursion(entry: LoreEntry) -> bool:
    return bool(entry.extensions.get("prevent_recursion"))


def _body(content: str) -> str:
    """Content without leading V3 `@@decorator` lines, stripped."""
    lines = content.strip().splitlines()
    while lines and lines[0].lstrip().startswith("@@"):
        lines.pop(0)
    return "\n".join(lines).strip()


def _entry_matches(entry: LoreEntry, text: str, guard: RegexGuard) -> bool:
    if not text or not _any_key_matches(entry, entry.keys, text, guard):
        return False
    if entry.selective and any(k.strip() for k in entry.secondary_keys):
        return _any_key_matches(entry, entry.secondary_keys, text, guard)
    return True


def _any_key_matches(entry: LoreEntry, keys: Sequence[str], text: str, guard: RegexGuard) -> bool:
    for key in keys:
        if not key.strip():
            continue  # an empty key would match every message
        if entry.use_regex:
            if guard.search(entry, key, text):
                return True
        elif _literal_matches(key, text, entry.is_case_sensitive, entry.match_whole_words):
            return True
    return False


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


@lru_cache(maxsize=512)
def _compile(pattern: str, case_sensitive: bool) -> regex.Pattern[str]:
    return regex.compile(pattern, 0 if case_sensitive else regex.IGNORECASE)
