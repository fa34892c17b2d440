"""The setup of a group: the whole cast once, `render_group_setup(cards, persona)`.

A group's system text holds every card of the cast, joined in the cast's stable order under
one lead that says the model writes the part of whoever is named at the end. It does not
depend on who speaks next, so every turn of the group, whoever answers, reuses it (and the
history after it) from the cache: a change of speaker costs only the last few positions. The
persona is said once, after the cast. Each card keeps its own sections and macros ({{char}} is
that card's name), as `render_setup` renders them with no default prompt and no persona.

SillyTavern's other option, "swap character cards" (only the speaker's card in the setup),
changes the prompt's first message at every change of speaker, so the whole history would be
evaluated again; it is not offered.
"""

from __future__ import annotations

from collections.abc import Sequence

from kotonia_tui.characters.card import CharacterCard
from kotonia_tui.characters.errors import CardError
from kotonia_tui.characters.limits import MAX_EXPANDED_CHARS
from kotonia_tui.characters.macros import MacroLimitError, apply_macros
from kotonia_tui.characters.setup import CharacterSetup, render_setup
from kotonia_tui.domain import DepthNote, Persona

GROUP_SYSTEM_PROMPT = (
    "This is an open-ended role-play between {{user}} and a cast of characters: {{cast}}. "
    "Each reply is written by the one character named at its start, in that character's "
    "voice, with that character's knowledge and feelings; a character knows only what they "
    "saw, heard or were told in the story. Write only the named character's part; never "
    "speak, act or decide for {{user}} or for another member of the cast. Keep to everything "
    "that has already happened in the story."
)


def cast_names(names: Sequence[str]) -> str:
    """ "A", "A and B", "A, B and C" """
    if len(names) <= 1:
        return "".join(names)
    return f"{', '.join(names[:-1])} and {names[-1]}"


def render_group_setup(
    cards: Sequence[CharacterCard],
    persona: Persona,
    *,
    lead: str = GROUP_SYSTEM_PROMPT,
    format_instruction: str = "",
) -> str:
    """The group's system text: the lead, each card in order, the persona. Pure."""
    names = [card.display_name for card in cards]
    try:
        head = apply_macros(lead, char=names[0] if names else "", user=persona.name)
    except MacroLimitError as exc:
        raise CardError("the group setup", str(exc)) from exc
    head = head.replace("{{cast}}", cast_names(names))
    if format_instruction:
        head = f"{head} {format_instruction}"
    nameless = Persona(name=persona.name, description="")
    parts = [head]
    for card in cards:
        own = render_setup(card, nameless, default_system_prompt="").system_text
        parts.append(f"# {card.display_name}\n\n{own}" if own else f"# {card.display_name}")
    if persona.description.strip():
        try:
            about = apply_macros(persona.description, char="", user=persona.name).strip()
        except MacroLimitError as exc:
            raise CardError("the persona", str(exc)) from exc
        parts.append(f"# {persona.name}\n\n{about}")
    text = "\n\n".join(parts)
    if len(text) > MAX_EXPANDED_CHARS:
        raise CardError(
            "the group setup",
            f"the cast's setups together are {len(text):,} characters (at most "
            f"{MAX_EXPANDED_CHARS:,}): take a member out of the group",
        )
    return text


def speaking_setup(
    group_text: str, speaker: CharacterSetup, notes: tuple[DepthNote, ...] = ()
) -> CharacterSetup:
    """The speaker's own setup (name, post-history instructions, greetings) over the group's
    shared system text, with the cast's Character's Notes (`notes`) for the speaker's own."""
    return speaker.model_copy(update={"system_text": group_text, "character_notes": notes})
