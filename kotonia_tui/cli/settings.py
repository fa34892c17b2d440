"""`kotonia settings`: a conversation's settings over the model profile (generation, Author's
Note and its depth, World Info, lore budget), shown and set as the settings screen (F9) does."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kotonia_tui.chat.bootstrap import open_store
from kotonia_tui.chat.chat_settings import (
    GENERATION_FIELDS,
    ChatSettingsError,
    TurnSettings,
    assigned,
    resolve,
    validated,
)
from kotonia_tui.chat.lore import WorldInfoFolder
from kotonia_tui.cli.output import UserError, json_text, say
from kotonia_tui.config import ModelProfile, Settings, app_dirs
from kotonia_tui.domain import ChatSettings
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
                }
            )
        )
    else:
        for name, value, set_by in rows:
            shown = ", ".join(value) if isinstance(value, list) else repr(value)
            print("\t".join(visible(field, one_line=True) for field in (name, shown, set_by)))
    return 0


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
