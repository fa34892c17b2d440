"""A conversation's settings as SillyTavern's `chat_metadata`, and back.

SillyTavern keeps a chat's Author's Note (`note_prompt`, `note_depth`, `note_position`,
`note_interval`, `note_role`) and its chat-bound lorebook (`world_info`, a name without
`.json`) in the chat file's header. Kotonia's `ChatSettings` hold the same things, plus what
SillyTavern has no field for (generation settings, the lore budget, more than one World Info
file), which travel under `chat_metadata["kotonia"]` so a chat exported and imported again
plays on with all of it.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from kotonia_tui.domain import MAX_AUTHOR_NOTE_DEPTH, ChatSettings

KOTONIA_BLOCK = "kotonia"
IN_CHAT = 1  # SillyTavern's note_position for "in chat, at depth" (0: after the scenario)
WORLD_INFO_SUFFIX = ".json"


def settings_from_metadata(metadata: object, where: str) -> tuple[ChatSettings, list[str]]:
    """The settings a header's `chat_metadata` carries, and notes on what could not be kept
    (each naming `where` and the field)."""
    if not isinstance(metadata, dict):
        return ChatSettings(), []
    notes: list[str] = []
    base = ChatSettings()
    block = metadata.get(KOTONIA_BLOCK)
    if block is not None:
        try:
            base = ChatSettings.model_validate(block)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "(root)"
            notes.append(
                f"{where}: chat_metadata.{KOTONIA_BLOCK}.{field} is not kept ({first['msg']})"
            )
    # SillyTavern's own fields win where they differ from what the block would write: the chat
    # may have been played on there after it left Kotonia.
    ours = metadata_with_settings({}, base) if block is not None else {}
    update: dict[str, Any] = {}
    note_fields = ("note_prompt", "note_position", "note_depth")
    note = metadata.get("note_prompt")
    if isinstance(note, str) and any(metadata.get(k) != ours.get(k) for k in note_fields):
        update["author_note"] = note
        update["author_note_depth"] = _depth(metadata, where, notes) if note else None
    world = metadata.get("world_info")
    if isinstance(world, str) and world != ours.get("world_info"):
        if world.strip():
            name = world.strip() + WORLD_INFO_SUFFIX
            update["world_info"] = (name, *(n for n in base.world_info if n != name))
        else:  # detached there: the one file SillyTavern knew of goes
            update["world_info"] = base.world_info[1:]
    return base.model_copy(update=update), notes


def _depth(metadata: dict[str, Any], where: str, notes: list[str]) -> int:
    position = metadata.get("note_position", IN_CHAT)
    depth = metadata.get("note_depth", 4)  # SillyTavern's default depth
    if position != IN_CHAT:
        notes.append(
            f"{where}: the Author's Note position {position!r} has no place here; "
            "it is placed after the history (depth 0)"
        )
        return 0
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        notes.append(f"{where}: chat_metadata.note_depth {depth!r} is not a depth; 0 is used")
        return 0
    if depth > MAX_AUTHOR_NOTE_DEPTH:
        notes.append(
            f"{where}: chat_metadata.note_depth {depth} is more than {MAX_AUTHOR_NOTE_DEPTH}; "
            f"{MAX_AUTHOR_NOTE_DEPTH} is used"
        )
        return MAX_AUTHOR_NOTE_DEPTH
    return depth


def metadata_with_settings(original: object, settings: ChatSettings) -> dict[str, Any]:
    """`original` chat_metadata (what an imported chat brought) with the settings written in
    SillyTavern's fields and the rest under `kotonia`. Metadata that already says these
    settings is written as it came, byte for byte."""
    metadata = dict(original) if isinstance(original, dict) else {}
    if settings_from_metadata(metadata, "")[0] == settings:
        return metadata
    metadata["note_prompt"] = settings.author_note
    metadata["note_position"] = IN_CHAT
    metadata["note_depth"] = settings.author_note_depth or 0
    metadata.setdefault("note_interval", 1)
    first = settings.world_info[0] if settings.world_info else ""
    metadata["world_info"] = first.removesuffix(WORLD_INFO_SUFFIX)
    metadata[KOTONIA_BLOCK] = settings.model_dump(mode="json", exclude_defaults=True)
    return metadata
