"""Lorebooks (a card's `character_book`, a World Info file): the entries, how they are read
and rendered.

Where lore goes in the prompt, and why
--------------------------------------
Keyed entries depend on the recent messages, so the set chosen can change on every turn. The
prompt assembler places `render_lore(selection.entries)` AFTER the verbatim history, just before
the new user message (the same place as `post_history_instructions`). Anything placed before the
history that changes with the recent messages would change the stable prompt prefix and force the
engine to re-evaluate the whole history (the KV cache only survives an unchanged prefix).
Constant entries of the card's book never change, so `render_setup` puts them in the system text
by default, and then the card's book is matched with `include_constant=False` so they are not
sent twice. World Info files belong to a character or a conversation, not to the shared setup:
all their entries, constant ones too, go after the history.

Which entries are chosen, and how they are matched: `characters/lore_selection.py`.

- Lines at the start of an entry's content that begin with `@@` are V3 decorators; they are not
  interpreted and are never sent to the model.
- `use_regex: true` (V3) makes an entry's keys regular expressions, except in a book SillyTavern
  wrote: it puts `use_regex: true` on every entry it exports ("ST keys are always regex", in
  its `convertWorldInfoToCharacterBook`), yet reads the keys as plain text when it loads a card
  (a key is a pattern there only when written `/like this/i`). Such an entry, known by the
  extension fields SillyTavern writes beside the flag (`display_index`, `selectiveLogic`), has
  its keys matched as text (`LoreEntry.keys_are_regex`), so a key such as `*hugs*` neither
  refuses the card nor matches what it does not say; the flag itself is kept for export.
  SillyTavern also writes an entry's case setting as `extensions.case_sensitive`; it is read
  when the spec's `case_sensitive` is absent.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Literal

import regex
from pydantic import BaseModel, Field, model_validator

from kotonia_tui.characters.errors import FieldError
from kotonia_tui.characters.json_fields import ObjectReader
from kotonia_tui.characters.limits import MAX_LORE_ENTRIES, MAX_TEXT_CHARS
from kotonia_tui.characters.macros import apply_macros

DEFAULT_MATCH_WHOLE_WORDS = True
# Extension fields SillyTavern writes on every entry of a book it exports (with `use_regex: true`).
_SILLYTAVERN_ENTRY_MARKS = ("display_index", "selectiveLogic")
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
        if self.keys_are_regex:
            for key in (*self.keys, *self.secondary_keys):
                try:
                    compile_key(key, self.is_case_sensitive)
                except regex.error as exc:
                    raise ValueError(f"not a valid regular expression {key!r} ({exc})") from exc
        return self

    @property
    def keys_are_regex(self) -> bool:
        """Whether the keys are matched as regular expressions (see the module docstring)."""
        return self.use_regex and not written_by_sillytavern(self.extensions)

    @property
    def is_case_sensitive(self) -> bool:
        if self.case_sensitive is not None:
            return self.case_sensitive
        # SillyTavern writes its per-entry case setting in the extensions, never beside `keys`.
        value = self.extensions.get("case_sensitive")
        return (
            value if isinstance(value, bool) and written_by_sillytavern(self.extensions) else False
        )

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
    extensions = entry.object("extensions")
    if use_regex and not written_by_sillytavern(extensions):
        for field, values in (("keys", keys), ("secondary_keys", secondary)):
            for index, key in enumerate(values):
                try:
                    compile_key(key, bool(case_sensitive))
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
        extensions=extensions,
        extra=entry.unknown(_ENTRY_FIELDS),
    )


def written_by_sillytavern(extensions: dict[str, Any]) -> bool:
    """Whether an entry's extensions are those SillyTavern writes when it exports a book."""
    return all(mark in extensions for mark in _SILLYTAVERN_ENTRY_MARKS)


def render_lore(
    entries: Sequence[LoreEntry], *, char: str | None = None, user: str | None = None
) -> str:
    """The entries' text as the model sees it; macros are applied when both names are given."""
    parts = [entry_body(entry.content) for entry in entries]
    text = "\n\n".join(part for part in parts if part)
    if char is not None and user is not None:
        text = apply_macros(text, char=char, user=user)
    return text


def entry_body(content: str) -> str:
    """Content without leading V3 `@@decorator` lines, stripped."""
    lines = content.strip().splitlines()
    while lines and lines[0].lstrip().startswith("@@"):
        lines.pop(0)
    return "\n".join(lines).strip()


@lru_cache(maxsize=512)
def compile_key(pattern: str, case_sensitive: bool) -> regex.Pattern[str]:
    return regex.compile(pattern, 0 if case_sensitive else regex.IGNORECASE)
