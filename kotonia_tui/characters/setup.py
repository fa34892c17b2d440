"""The character setup the model sees: `render_setup(card, persona) -> CharacterSetup`.

`system_text` is the whole system prompt of a conversation, and it is the base of the prompt
cache: for one card and one persona it is byte-for-byte the same every time (no timestamps, no
random picks, no per-conversation memory), so every turn of every conversation with that
character reuses it. `creator_notes` are for the human reading the card and are never part of
anything rendered here. Every field is passed through the card macros (`macros.py`).

Order of `system_text`: the card's `system_prompt` (or `DEFAULT_SYSTEM_PROMPT`; a card's
`{{original}}` stands for the default), the description, personality, scenario, the persona,
the constant lorebook entries (they never change, so they cost nothing here) and the example
dialogue, split on `<START>`. Sections with no text are left out.

The card's Character's Note (`extensions.depth_prompt`) is not part of `system_text`: it sits in
the history at its depth (`character_notes`, placed by memory/assembly.py).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from kotonia_tui.characters.card import CharacterCard
from kotonia_tui.characters.errors import CardError
from kotonia_tui.characters.limits import MAX_EXPANDED_CHARS
from kotonia_tui.characters.lorebook import render_lore
from kotonia_tui.characters.macros import MacroLimitError, apply_macros
from kotonia_tui.domain import DepthNote, Persona

DEFAULT_SYSTEM_PROMPT = (
    "This is an open-ended role-play between {{char}} and {{user}}. You are {{char}}. "
    "Stay in character: speak, act and think as {{char}} would, with {{char}}'s knowledge, "
    "voice and feelings, and let {{char}} have wants of their own. Write only {{char}}'s part; "
    "never speak, act or decide for {{user}}. Keep to everything that has already happened in "
    "the story. Use the language {{char}} speaks in the setup below unless {{user}} asks "
    "otherwise."
)

_START = re.compile(r"<start>", re.IGNORECASE)


class CharacterSetup(BaseModel):
    """What a conversation needs from a card, with the macros already applied."""

    model_config = ConfigDict(frozen=True)

    key: str
    name: str
    nickname: str | None = None
    system_text: str  # the system prompt; identical for every conversation with card + persona
    post_history: str = ""  # goes after the history, before the new message
    greetings: tuple[str, ...] = ()  # first_mes, then alternate_greetings: possible openings
    examples: tuple[str, ...] = ()  # the example dialogues, also part of system_text
    constant_lore_in_system: bool = True  # if so, call select_entries(include_constant=False)
    # The card's Character's Note, placed in the history at its depth; in a group, the cast's.
    character_notes: tuple[DepthNote, ...] = ()

    @property
    def display_name(self) -> str:
        return self.nickname or self.name


def render_setup(
    card: CharacterCard,
    persona: Persona,
    *,
    default_system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    default_post_history: str = "",
    constant_lore_in_system: bool = True,
) -> CharacterSetup:
    """Render the card for one persona. Pure: the same inputs always give the same text."""
    char = card.display_name
    user = persona.name
    where = card.source_path or card.key

    def fill(text: str, original: str | None = None, field: str = "setup") -> str:
        try:
            return apply_macros(text, char=char, user=user, original=original).strip()
        except MacroLimitError as exc:
            raise CardError(where, f"{field}: {exc}") from exc

    default_prompt = fill(default_system_prompt)
    system_prompt = (
        fill(card.system_prompt, default_prompt, "data.system_prompt")
        if card.system_prompt.strip()
        else ""
    )
    examples = tuple(
        fill(block, field="data.mes_example")
        for block in _START.split(card.mes_example)
        if block.strip()
    )
    sections = [
        ("", system_prompt or default_prompt),
        (f"About {char}", fill(card.description, field="data.description")),
        (f"{char}'s personality", fill(card.personality, field="data.personality")),
        ("Scenario", fill(card.scenario, field="data.scenario")),
        (f"About {user}, who {char} is talking with", fill(persona.description, field="persona")),
    ]
    if constant_lore_in_system and card.character_book is not None:
        constant = [e for e in card.character_book.entries if e.enabled and e.constant]
        try:
            sections.append(("World notes", render_lore(constant, char=char, user=user)))
        except MacroLimitError as exc:
            raise CardError(where, f"data.character_book (constant entries): {exc}") from exc
    if examples:
        heading = f"Example dialogue (how {char} talks; these exchanges are not part of the story)"
        sections.append((heading, "\n\n".join(examples)))
    system_text = "\n\n".join(
        f"## {heading}\n{body}" if heading else body for heading, body in sections if body
    )
    if len(system_text) > MAX_EXPANDED_CHARS:
        raise CardError(
            where,
            f"the setup (system prompt, description, personality, scenario, lore, examples) is "
            f"{len(system_text):,} characters with its macros (at most {MAX_EXPANDED_CHARS:,})",
        )
    greetings = tuple(
        text
        for text in (
            fill(card.first_mes, field="data.first_mes"),
            *(
                fill(g, field=f"data.alternate_greetings[{i}]")
                for i, g in enumerate(card.alternate_greetings)
            ),
        )
        if text
    )
    note = card.character_note  # as SillyTavern reads it (the loader reported any repair)
    notes: tuple[DepthNote, ...] = ()
    said = fill(note.prompt, field="data.extensions.depth_prompt.prompt") if note else ""
    if note is not None and said:
        # A user note is signed with the persona's name, as SillyTavern's `doChatInject` signs
        # it. An assistant note is signed with its own card's name: in a one-card chat that is
        # SillyTavern's too, but in a group SillyTavern signs it with whoever answers the turn;
        # the owner's name keeps the line the same whoever answers, so the cache holds.
        name = {"user": user, "assistant": char}.get(note.role, "")
        notes = (DepthNote(said, note.depth, note.role, name=name, owner=char),)
    return CharacterSetup(
        key=card.key,
        name=card.name,
        nickname=card.nickname,
        system_text=system_text,
        post_history=fill(
            card.post_history_instructions,
            fill(default_post_history),
            "data.post_history_instructions",
        ),
        greetings=greetings,
        examples=examples,
        constant_lore_in_system=constant_lore_in_system,
        character_notes=notes,
    )
