"""A card's Character's Note: SillyTavern's `data.extensions.depth_prompt`.

SillyTavern writes it as `{"prompt": str, "depth": int, "role": "system"|"user"|"assistant"}`
and, every turn, puts the prompt into the chat history `depth` messages from its end as a
message of that role, with {{char}} and {{user}} filled in (public/script.js: the
"character-specific A/N"). A missing depth is 4 and a missing role "system", SillyTavern's
`depth_prompt_depth_default` and `depth_prompt_role_default`; an empty prompt is no note (most
chub.ai exports carry one). The object stays in `extensions` as it was read, so an export
writes it back unchanged; this module only reads it. Where the prompt places it:
memory/assembly.py.

A note written otherwise is read as SillyTavern reads it, never refused: its
`setExtensionPrompt` stores `Number(depth)` (so `"4"` is 4 and `true` is 1), its
`getExtensionPromptRoleByName` takes the numbers 0/1/2 for system/user/assistant and any other
role as system, and its `doChatInject` places nothing at a depth that is not a whole number
from 0 to `MAX_INJECTION_DEPTH`. Each such reading is a repair the card list reports (the
field, the value and what it was read as), as it reports invalid Unicode replaced. Only a
prompt past the size bounds refuses the card, as any text field past them does (card_json.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from kotonia_tui.domain import MAX_AUTHOR_NOTE_DEPTH, ChatRole

DEPTH_PROMPT = "depth_prompt"
DEFAULT_DEPTH = 4
DEFAULT_ROLE: ChatRole = "system"
ROLES: tuple[ChatRole, ...] = ("system", "user", "assistant")  # SillyTavern's 0, 1, 2
# What JavaScript's Number() reads as a decimal number; anything else in a string is NaN there
# (SillyTavern then places the note at no depth). A blank string is 0 to Number().
_DECIMAL = re.compile(r"[+-]?[0-9]+(?:\.[0-9]*)?")
_SHOWN_CHARS = 40  # of a value quoted in a repair


class CharacterNote(BaseModel):
    """The note as the card writes it (macros not filled in)."""

    model_config = ConfigDict(frozen=True)

    prompt: str
    depth: int = DEFAULT_DEPTH
    role: ChatRole = DEFAULT_ROLE


@dataclass(frozen=True)
class NoteReading:
    """What `read_character_note` found: the note (None: the card has none, or none that
    SillyTavern would place), the repairs made reading it (one line each, naming the field and
    the value), and the prompt as written when it is text (for the size bounds)."""

    note: CharacterNote | None
    repairs: tuple[str, ...] = ()
    prompt: str = ""


def read_character_note(extensions: dict[str, Any], prefix: str = "data.extensions") -> NoteReading:
    """The card's note as SillyTavern reads it, and what was repaired on the way; never
    raises. A note with an empty prompt is none, and nothing in it is reported (SillyTavern
    ignores it whatever its depth and role say)."""
    raw = extensions.get(DEPTH_PROMPT)
    if raw is None:
        return NoteReading(None)
    path = f"{prefix}.{DEPTH_PROMPT}" if prefix else DEPTH_PROMPT
    if not isinstance(raw, dict):
        return NoteReading(None, (f"{path}: {_shown(raw)} is not an object: no Character's Note",))
    prompt = raw.get("prompt")
    if prompt is None:
        return NoteReading(None)
    if not isinstance(prompt, str):
        repair = f"{path}.prompt: {_shown(prompt)} is not text: no Character's Note"
        return NoteReading(None, (repair,))
    if not prompt.strip():
        return NoteReading(None, prompt=prompt)
    repairs: list[str] = []
    depth = _depth(raw.get("depth"), f"{path}.depth", repairs)
    role = _role(raw.get("role"), f"{path}.role", repairs)
    note = None if depth is None else CharacterNote(prompt=prompt, depth=depth, role=role)
    return NoteReading(note, tuple(repairs), prompt)


def _depth(value: object, path: str, repairs: list[str]) -> int | None:
    """The depth as SillyTavern's `Number(depth)` reads it; None: it places the note nowhere."""
    if value is None:
        return DEFAULT_DEPTH  # SillyTavern's `depth ?? depth_prompt_depth_default`
    number: float | None = None
    if isinstance(value, bool):
        number = int(value)  # Number(true) is 1, Number(false) 0
    elif isinstance(value, int | float):
        number = value
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            number = 0
        elif _DECIMAL.fullmatch(text):
            number = float(text)
    if number is None or number != number or number in (float("inf"), float("-inf")):
        repairs.append(f"{path}: {_shown(value)} is not a number: no Character's Note")
        return None
    if not float(number).is_integer():
        repairs.append(
            f"{path}: {_shown(value)} is not a whole number: no Character's Note, as "
            "SillyTavern places none at it"
        )
        return None
    depth = int(number)
    if not 0 <= depth <= MAX_AUTHOR_NOTE_DEPTH:
        repairs.append(
            f"{path}: {_shown(value)} is not a depth from 0 to {MAX_AUTHOR_NOTE_DEPTH}: no "
            "Character's Note, as SillyTavern places none there"
        )
        return None
    # A whole JSON number (4.0) is the number 4 to SillyTavern as to JSON: nothing to repair.
    if isinstance(value, bool | str):
        repairs.append(f"{path}: {_shown(value)} read as {depth}, as SillyTavern reads it")
    return depth


def _role(value: object, path: str, repairs: list[str]) -> ChatRole:
    """The role as SillyTavern's `getExtensionPromptRoleByName` reads it."""
    if value is None:
        return DEFAULT_ROLE  # SillyTavern's `role ?? depth_prompt_role_default`
    for role in ROLES:
        if value == role and isinstance(value, str):
            return role
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if number is not None and number in (0, 1, 2):
        role = ROLES[int(number)]
        repairs.append(f'{path}: {_shown(value)} read as "{role}", as SillyTavern reads it')
        return role
    repairs.append(
        f'{path}: {_shown(value)} read as "{DEFAULT_ROLE}", as SillyTavern reads a role it '
        "does not know"
    )
    return DEFAULT_ROLE


def _shown(value: object) -> str:
    """A JSON value as the card writes it, on one line, cut short."""
    text = " ".join(json.dumps(value, ensure_ascii=False, default=str).split())
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"
