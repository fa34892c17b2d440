"""`kotonia settings`: a conversation's settings over the model profile (generation, Author's
Note and its depth, World Info, lore budget), shown and set as the settings screen (F9) does.

Beside the Author's Note it shows each card's Character's Note (SillyTavern's
`extensions.depth_prompt`, placed like the Author's Note) as the card writes it, with its depth
and role: the conversation's card, or in a group every member's. It is the card's, not a
setting: `--set` does not change it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kotonia_tui.chat.bootstrap import open_library, open_store
from kotonia_tui.chat.chat_settings import (
    GENERATION_FIELDS,
    ChatSettingsError,
    TurnSettings,
    assigned,
    resolve,
    validated,
)
from kotonia_tui.chat.library import CharacterLibrary
from kotonia_tui.chat.lore import WorldInfoFolder
from kotonia_tui.cli.output import UserError, json_text, say
from kotonia_tui.config import ModelProfile, Settings, app_dirs
from kotonia_tui.domain import CastMember, ChatSettings
from kotonia_tui.memory.budgets import Budgets
from kotonia_tui.terminal_text import visible


def chat_settings(args: argparse.Namespace, settings: Settings) -> int:
    profile = settings.active_profile()
    world = WorldInfoFolder(settings.world_info_folder(app_dirs()))
    layer = "character" if args.character else "conversation"
    with open_store(settings, args.db, read_only=args.read_only and not args.set) as store:
        conv = store.get_conversation(args.id)
        layers = {
            "character": store.character_settings(conv.character_key),
            "conversation": store.conversation_settings(conv.id),
        }
        for assignment in args.set:
            name, sep, value = assignment.partition("=")
            if not sep:
                raise UserError(f"--set takes NAME=VALUE, not {assignment!r}")
            try:
                layers[layer] = assigned(layers[layer], name.strip(), value)
            except ChatSettingsError as exc:
                raise UserError(f"conversation {conv.id}: {exc}") from exc
        character, conversation = layers["character"], layers["conversation"]
        try:
            effective = validated(
                profile,
                character,
                conversation,
                n_ctx=profile.n_ctx,
                lore_budget=_lore_default(profile, character, conversation, settings),
                world_info=world,
            )
        except ChatSettingsError as exc:
            raise UserError(f"conversation {conv.id}: {exc}; nothing was saved") from exc
        if args.set:
            if args.character:
                store.set_character_settings(conv.character_key, character)
            else:
                store.set_conversation_settings(conv.id, conversation)
            say(f"saved the {layer}'s settings of conversation {conv.id}", stream=sys.stderr)
        cast = store.cast(conv.id)
    library = open_library(settings)
    notes, missing = _character_notes(cast, library)
    for member in missing:
        # A card whose file is there but broken is said as the picker says it, with its reason.
        error = library.error_of(member.character_key)
        where = (
            f"could not be read ({error})"
            if error is not None
            else "is not in the character folders"
        )
        say(
            f"conversation {conv.id}: the card {member.character_key!r} {where}: its "
            "Character's Note, if it has one, cannot be shown",
            stream=sys.stderr,
        )
    rows = _rows(effective, character, conversation)
    if args.json:
        print(
            json_text(
                {
                    "conversation_id": conv.id,
                    "character_key": conv.character_key,
                    "profile": settings.profile,
                    "n_ctx": profile.n_ctx,
                    "conversation": conversation.model_dump(mode="json"),
                    "character": character.model_dump(mode="json"),
                    "effective": {name: {"value": v, "layer": by} for name, v, by in rows},
                    "character_notes": notes,
                }
            )
        )
    else:
        # The cards' notes right after the Author's Note: both are placed in the history so.
        at = next(i for i, row in enumerate(rows) if row[0] == "author_note_depth") + 1
        rows[at:at] = [row for note in notes for row in _note_rows(note)]
        for name, value, set_by in rows:
            shown = ", ".join(value) if isinstance(value, list) else repr(value)
            print("\t".join(visible(field, one_line=True) for field in (name, shown, set_by)))
    return 0


def _character_notes(
    cast: list[CastMember], library: CharacterLibrary
) -> tuple[list[dict[str, Any]], list[CastMember]]:
    """The Character's Notes of the conversation's cards, in the cast's order, as the cards
    write them (macros not filled in; a note SillyTavern would place nowhere is none), and
    the members whose card was not loaded (not in the character folders, or broken)."""
    notes: list[dict[str, Any]] = []
    missing: list[CastMember] = []
    for member in cast:
        card = library.card_of(member.character_key, member.character_name)
        if card is None:
            missing.append(member)
            continue
        note = card.character_note
        if note is not None:
            notes.append(
                {
                    "character_key": card.key,
                    "character_name": card.name,
                    "prompt": note.prompt,
                    "depth": note.depth,
                    "role": note.role,
                    # A muted member's note is placed only on a turn that member answers.
                    "muted": member.muted,
                }
            )
    return notes, missing


def _note_rows(note: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """A card's Character's Note as rows like the settings': its text, depth and role, each
    said to be the card's."""
    card = f"card {note['character_key']}"
    if note["muted"]:
        card += " (muted: placed only on its own turns)"
    return [
        ("character_note", note["prompt"], card),
        ("character_note_depth", note["depth"], card),
        ("character_note_role", note["role"], card),
    ]


def _lore_default(
    profile: ModelProfile, character: ChatSettings, conversation: ChatSettings, settings: Settings
) -> int:
    """The app's lore budget for this conversation: its share of the window, as the budgets
    a turn runs with (which depend on the reply length in effect) make it."""
    reply = resolve(profile, character, conversation, lore_budget=0).reply_max_tokens
    return Budgets.for_window(profile.n_ctx, reply, settings).lore


def _rows(
    effective: TurnSettings, character: ChatSettings, conversation: ChatSettings
) -> list[tuple[str, Any, str]]:
    """Each setting in effect, its value and the layer that set it ("" where none did)."""
    rows: list[tuple[str, Any, str]] = [
        (name, effective.generation[name].value, effective.generation[name].layer.value)
        for name in GENERATION_FIELDS
    ]
    note_layer = effective.author_note_layer.value if effective.author_note_layer else ""
    depth_layer = next(
        (
            name
            for name, layer in (("conversation", conversation), ("character", character))
            if layer.author_note_depth is not None
        ),
        "",
    )
    files = [name for name, _layer in effective.world_info]
    file_layers = ", ".join(dict.fromkeys(layer.value for _name, layer in effective.world_info))
    rows += [
        ("author_note", effective.author_note, note_layer),
        ("author_note_depth", effective.author_note_depth, depth_layer),
        ("world_info", files, file_layers),
        ("lore_budget", effective.lore_budget.value, effective.lore_budget.layer.value),
    ]
    return rows
