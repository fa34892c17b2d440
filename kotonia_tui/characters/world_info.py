"""Standalone World Info files (SillyTavern's lorebooks) read as a `Lorebook`.

SillyTavern saves a World Info book as `{"entries": {"0": {...}, "1": {...}}}`: an object of
entries keyed by their uid, with its own field names (`key`, `keysecondary`, `order`,
`disable`, `caseSensitive`, `matchWholeWords`, `scanDepth`, ...). A file holding a card's
`character_book` shape (`"entries": [...]`, as other tools export lorebooks) is read too.
The fields SillyTavern has and Kotonia does not model are kept in each entry's `extensions`
(its `selectiveLogic` is applied; see lore_selection.py for what is not). A wrong field is a
`FieldError` naming it, as for a card.
"""

from __future__ import annotations

from typing import Any

from kotonia_tui.characters.errors import FieldError
from kotonia_tui.characters.json_fields import ObjectReader, json_type_name
from kotonia_tui.characters.limits import MAX_LORE_ENTRIES, MAX_TEXT_CHARS
from kotonia_tui.characters.lorebook import Lorebook, LoreEntry, parse_lorebook

# SillyTavern's entry fields read into LoreEntry; every other field goes to `extensions`.
_MAPPED = {
    "uid",
    "key",
    "keysecondary",
    "comment",
    "content",
    "constant",
    "selective",
    "order",
    "disable",
    "caseSensitive",
    "matchWholeWords",
    "scanDepth",
    "excludeRecursion",
    "preventRecursion",
    "priority",
}


def parse_world_info(obj: Any, name: str = "") -> Lorebook:
    """A World Info file's JSON as a lorebook; `FieldError` names the field that is wrong."""
    if not isinstance(obj, dict):
        raise FieldError("(root)", f"expected an object with entries, got {json_type_name(obj)}")
    entries = obj.get("entries")
    if isinstance(entries, list):
        book = parse_lorebook(obj, "")
        return book if book.name else book.model_copy(update={"name": name or None})
    if not isinstance(entries, dict):
        raise FieldError("entries", f"expected an object of entries, got {json_type_name(entries)}")
    if len(entries) > MAX_LORE_ENTRIES:
        raise FieldError(
            "entries", f"has {len(entries):,} entries (a lorebook may have {MAX_LORE_ENTRIES:,})"
        )
    parsed = []
    for uid, raw in entries.items():
        path = f"entries.{uid}"
        if not isinstance(raw, dict):
            raise FieldError(path, f"expected an object, got {json_type_name(raw)}")
        parsed.append(_entry(ObjectReader(raw, path)))
    reader = ObjectReader(obj)
    return Lorebook(
        name=reader.optional_string("name") or name or None,
        description=reader.optional_string("description"),
        entries=parsed,
    )


def _entry(entry: ObjectReader) -> LoreEntry:
    content = entry.string("content")
    if len(content) > MAX_TEXT_CHARS:
        raise FieldError(
            entry.path("content"),
            f"is {len(content):,} characters long (an entry may have {MAX_TEXT_CHARS:,})",
        )
    keys = entry.strings("key")
    secondary = entry.strings("keysecondary")
    extensions = entry.unknown(_MAPPED)
    whole_words = entry.optional_boolean("matchWholeWords")
    if whole_words is not None:
        extensions["match_whole_words"] = whole_words
    scan_depth = entry.optional_integer("scanDepth")
    if scan_depth is not None:
        extensions["scan_depth"] = scan_depth
    for field, key in (
        ("excludeRecursion", "exclude_recursion"),
        ("preventRecursion", "prevent_recursion"),
    ):
        if entry.boolean(field, False):
            extensions[key] = True
    logic = extensions.get("selectiveLogic")
    if logic is not None and logic not in (0, 1, 2, 3):
        raise FieldError(entry.path("selectiveLogic"), f"expected 0, 1, 2 or 3, got {logic!r}")
    comment = entry.optional_string("comment")
    case_sensitive = entry.optional_boolean("caseSensitive")
    return LoreEntry(
        keys=keys,
        secondary_keys=secondary,
        selective=entry.boolean("selective", bool(secondary)),
        content=content,
        enabled=not entry.boolean("disable", False),
        insertion_order=entry.integer("order", 100),
        case_sensitive=case_sensitive,
        constant=entry.boolean("constant", False),
        priority=entry.optional_integer("priority"),
        name=comment,
        comment=comment,
        id=entry.int_or_string("uid"),
        extensions=extensions,
    )
