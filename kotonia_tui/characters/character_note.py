"""A card's Character's Note: SillyTavern's `data.extensions.depth_prompt`.

SillyTavern writes it as `{"prompt": str, "depth": int, "role": "system"|"user"|"assistant"}`
and, every turn, puts the prompt into the chat history `depth` messages from its end as a
message of that role, with {{char}} and {{user}} filled in (public/script.js: the
"character-specific A/N"). A missing depth is 4 and a missing role "system", SillyTavern's
`depth_prompt_depth_default` and `depth_prompt_role_default`; an empty prompt is no note (most
chub.ai exports carry one). The object stays in `extensions` as it was read, so an export
writes it back unchanged; this module only reads it. Where the prompt places it:
memory/assembly.py.
"""

from __future__ import annotations

from typing import Any, cast

from pydantic import BaseModel, ConfigDict

from kotonia_tui.characters.errors import FieldError
from kotonia_tui.characters.json_fields import ObjectReader, json_type_name
from kotonia_tui.domain import MAX_AUTHOR_NOTE_DEPTH, ChatRole

DEPTH_PROMPT = "depth_prompt"
DEFAULT_DEPTH = 4
DEFAULT_ROLE: ChatRole = "system"
ROLES: tuple[ChatRole, ...] = ("system", "user", "assistant")


class CharacterNote(BaseModel):
    """The note as the card writes it (macros not filled in)."""

    model_config = ConfigDict(frozen=True)

    prompt: str
    depth: int = DEFAULT_DEPTH
    role: ChatRole = DEFAULT_ROLE


def read_character_note(
    extensions: dict[str, Any], prefix: str = "data.extensions"
) -> CharacterNote | None:
    """The card's note, or None when it has none. A wrong field raises `FieldError` naming it
    (`data.extensions.depth_prompt.depth`), whether or not the prompt is empty: a card is read
    the same way whatever its prompt holds.

    Stricter than SillyTavern, which takes `"4"` as 4 and an unknown role as system, and
    injects nothing at a negative depth or one past 1000: each of these would change what the
    model sees without a word, so the card is refused with the field named, as a card with
    any other wrong field is."""
    raw = extensions.get(DEPTH_PROMPT)
    if raw is None:
        return None
    path = f"{prefix}.{DEPTH_PROMPT}" if prefix else DEPTH_PROMPT
    if not isinstance(raw, dict):
        raise FieldError(path, f"expected an object, got {json_type_name(raw)}")
    note = ObjectReader(raw, path)
    prompt = note.string("prompt")
    depth = note.integer("depth", DEFAULT_DEPTH)
    if depth < 0:
        raise FieldError(note.path("depth"), f"expected a whole number of 0 or more, got {depth}")
    if depth > MAX_AUTHOR_NOTE_DEPTH:
        raise FieldError(
            note.path("depth"),
            f"{depth} is deeper than {MAX_AUTHOR_NOTE_DEPTH} (SillyTavern places no note deeper)",
        )
    role = raw.get("role")
    if role is None:
        role = DEFAULT_ROLE
    elif role not in ROLES:
        shown = repr(role) if isinstance(role, str) else json_type_name(role)
        raise FieldError(
            note.path("role"), f"expected 'system', 'user' or 'assistant', got {shown}"
        )
    if not prompt.strip():
        return None
    return CharacterNote(prompt=prompt, depth=depth, role=cast(ChatRole, role))
