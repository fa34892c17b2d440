"""Reading a card's JSON object (V1 flat, V2 `chara_card_v2`, V3 `chara_card_v3`) into fields.

`parse_card_object` checks every field it models and raises `FieldError` naming the first wrong
one by its path (`data.alternate_greetings[2]`); the loader adds the file name. What is read as
SillyTavern reads it instead (a Character's Note written otherwise, characters/character_note.py)
is a repair, one line naming the field and the value, that the loader reports.
"""

from __future__ import annotations

from typing import Any

from kotonia_tui.characters.card import SPEC_V2, SPEC_V3, CardAsset, SpecVersion
from kotonia_tui.characters.character_note import read_character_note
from kotonia_tui.characters.errors import FieldError
from kotonia_tui.characters.json_fields import ObjectReader, json_type_name
from kotonia_tui.characters.limits import MAX_GREETINGS, MAX_NAME_CHARS, MAX_TEXT_CHARS
from kotonia_tui.characters.lorebook import parse_lorebook
from kotonia_tui.characters.macros import MacroLimitError, apply_macros

_TEXT_FIELDS = (
    "description",
    "personality",
    "scenario",
    "first_mes",
    "mes_example",
    "system_prompt",
    "post_history_instructions",
    "creator_notes",
    "creator",
)
_DATA_FIELDS = {
    "name",
    *_TEXT_FIELDS,
    "alternate_greetings",
    "nickname",
    "tags",
    "character_version",
    "group_only_greetings",
    "extensions",
    "character_book",
    "assets",
}
# V2/V3 files often repeat the V1 fields beside `data` for old readers; they are regenerated
# from `data` on export instead of being kept as stale copies.
_ROOT_MIRRORS = {"spec", "spec_version", "data", "name", "description", "personality", "scenario"}
_ROOT_MIRRORS |= {"first_mes", "mes_example", "tags"}
# Field names of pre-V1 (Pygmalion / early TavernAI) exports, read when the V1 name is absent.
_LEGACY_V1 = {
    "char_name": "name",
    "char_persona": "description",
    "world_scenario": "scenario",
    "char_greeting": "first_mes",
    "example_dialogue": "mes_example",
}


def parse_card_object(obj: Any, repairs: list[str] | None = None) -> dict[str, Any]:
    """The `CharacterCard` fields of a card JSON object (everything but key, path, hash, image);
    what was repaired reading it is appended to `repairs`."""
    if not isinstance(obj, dict):
        raise FieldError("", f"expected a JSON object at the top level, got {json_type_name(obj)}")
    spec = obj.get("spec")
    if spec is None:
        return _parse_v1(obj, repairs)
    if spec not in (SPEC_V2, SPEC_V3):
        shown = repr(spec) if isinstance(spec, str) else json_type_name(spec)
        raise FieldError("spec", f"unknown card format {shown} (expected {SPEC_V2} or {SPEC_V3})")
    root = ObjectReader(obj)
    if not isinstance(obj.get("data"), dict):
        raise FieldError("data", "missing" if obj.get("data") is None else "expected an object")
    version = SpecVersion.V3 if spec == SPEC_V3 else SpecVersion.V2
    fields = _parse_data(ObjectReader(obj["data"], "data"), version, repairs)
    fields.update(
        spec=version,
        extra_root={k: v for k, v in obj.items() if k not in _ROOT_MIRRORS},
        raw_json=obj,
    )
    root.version_string("spec_version")  # checked only so a wrong type is reported
    return fields


def _parse_v1(obj: dict[str, Any], repairs: list[str] | None) -> dict[str, Any]:
    flat = dict(obj)
    for old, new in _LEGACY_V1.items():
        if flat.get(new) is None and old in flat:
            flat[new] = flat.pop(old)
    fields = _parse_data(ObjectReader(flat), SpecVersion.V1, repairs)
    extra = fields.pop("extra_data")
    fields.update(spec=SpecVersion.V1, extra_data={}, extra_root=extra, raw_json=obj)
    return fields


def _parse_data(
    data: ObjectReader, version: SpecVersion, repairs: list[str] | None
) -> dict[str, Any]:
    fields: dict[str, Any] = {"name": data.required_string("name")}
    fields.update((name, data.string(name)) for name in _TEXT_FIELDS)
    fields["alternate_greetings"] = data.strings("alternate_greetings")
    fields["tags"] = data.strings("tags")
    fields["character_version"] = data.version_string("character_version")
    fields["extensions"] = data.object("extensions")
    # Kept verbatim in `extensions`; read here so what SillyTavern would read otherwise is
    # reported, and a prompt past the bounds refuses the card (`_check_sizes`).
    note = read_character_note(fields["extensions"], data.path("extensions"))
    if repairs is not None:
        repairs.extend(note.repairs)
    fields["nickname"] = data.optional_string("nickname")
    fields["group_only_greetings"] = data.strings("group_only_greetings")
    book = data.obj.get("character_book")
    if book is not None:
        fields["character_book"] = parse_lorebook(
            data.object("character_book"), data.path("character_book")
        )
    fields["assets"] = [
        _parse_asset(ObjectReader(raw, f"{data.path('assets')}[{index}]"))
        for index, raw in enumerate(data.objects("assets"))
    ]
    _check_sizes(data, fields, note.prompt)
    known = _DATA_FIELDS if version is not SpecVersion.V1 else _DATA_FIELDS | _ROOT_MIRRORS
    fields["extra_data"] = data.unknown(known)
    return fields


def _check_sizes(data: ObjectReader, fields: dict[str, Any], note: str) -> None:
    """Refuse what would stall the app (see `limits`), naming the field (`note`: the
    Character's Note's prompt when it is text, whether or not it is placed)."""
    for key in ("name", "nickname"):
        if len(fields[key] or "") > MAX_NAME_CHARS:
            raise FieldError(
                data.path(key),
                f"is {len(fields[key]):,} characters long (a name may have {MAX_NAME_CHARS})",
            )
    greetings = fields["alternate_greetings"]
    if len(greetings) > MAX_GREETINGS:
        raise FieldError(
            data.path("alternate_greetings"),
            f"has {len(greetings):,} greetings (a card may have {MAX_GREETINGS})",
        )
    char = fields["nickname"] or fields["name"]
    texts = [(data.path(name), fields[name]) for name in _TEXT_FIELDS]
    texts += [(f"{data.path('alternate_greetings')}[{i}]", g) for i, g in enumerate(greetings)]
    texts.append((f"{data.path('extensions')}.depth_prompt.prompt", note))
    for path, text in texts:
        if len(text) > MAX_TEXT_CHARS:
            raise FieldError(
                path, f"is {len(text):,} characters long (a card field may have {MAX_TEXT_CHARS:,})"
            )
        try:
            apply_macros(text, char=char, user="")
        except MacroLimitError as exc:
            raise FieldError(path, str(exc)) from exc


def _parse_asset(asset: ObjectReader) -> CardAsset:
    return CardAsset(
        type=asset.string("type"),
        uri=asset.string("uri"),
        name=asset.string("name"),
        ext=asset.string("ext"),
        extra=asset.unknown({"type", "uri", "name", "ext"}),
    )
