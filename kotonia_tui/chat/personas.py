"""Personas: who the user plays (a name, a description, an optional picture), kept in the store.

One persona is the default: new conversations are played as it unless another is chosen. The
first time the app opens a database without a default, the settings' persona (`[persona]` in
config.toml, or `KOTONIA_PERSONA__NAME`) becomes it; after that the default is chosen in the
app. `{{user}}` in a card, a greeting, a lorebook entry and the chronicler's instructions is
the persona's name; its description goes into the character setup.

A conversation is played as one persona, linked and copied onto its row. Changing the persona
of a conversation, or editing a persona conversations are played as, changes the setup those
conversations' next prompts start with: that turn reads the whole prompt again (once), and what
was already written (messages, chapters) keeps the name it was written with.
"""

from __future__ import annotations

from pathlib import Path

from kotonia_tui.characters.limits import MAX_NAME_CHARS, MAX_TEXT_CHARS
from kotonia_tui.chat.derived_copies import DerivedCopies
from kotonia_tui.chat.errors import PersonaError
from kotonia_tui.chat.images import store_image
from kotonia_tui.domain import Persona, StoredPersona
from kotonia_tui.store import Store

KEEP = "keep"  # `update(picture=KEEP)`: the persona keeps the picture it has


def check_name(name: str) -> str:
    """The name as stored (outer space removed), or PersonaError saying what is wrong."""
    cleaned = name.strip()
    if not cleaned:
        raise PersonaError("a persona needs a name")
    if len(cleaned) > MAX_NAME_CHARS:
        raise PersonaError(
            f"persona name is {len(cleaned):,} characters (at most {MAX_NAME_CHARS})"
        )
    # The name starts the user's lines in a transcript prompt ("Ann: ..."): one line only.
    if any(ch in cleaned for ch in "\r\n\x00") or not cleaned.isprintable():
        raise PersonaError(f"persona name {cleaned!r} must be one line of printable text")
    return cleaned


def check_description(description: str) -> str:
    if len(description) > MAX_TEXT_CHARS:
        raise PersonaError(
            f"persona description is {len(description):,} characters (at most {MAX_TEXT_CHARS:,})"
        )
    return description.strip()


class PersonaBook:
    """The personas of one database, with the settings' persona as the first default."""

    def __init__(self, store: Store, first_default: Persona) -> None:
        self.store = store
        self.first_default = first_default

    def all(self) -> list[StoredPersona]:
        self.default()  # there is always one to show
        return self.store.personas()

    def default(self) -> StoredPersona:
        """The default persona; the settings' persona becomes it the first time."""
        found = self.store.default_persona()
        if found is not None:
            return found
        first = self.first_default
        existing = self.store.find_persona(first.name)
        if existing is not None:
            return self.store.set_default_persona(existing.id)
        try:
            name, description = check_name(first.name), check_description(first.description)
        except PersonaError as exc:
            raise PersonaError(f"the persona setting: {exc}") from exc
        return self.store.create_persona(name, description, default=True)

    def get(self, persona_id: int) -> StoredPersona:
        return self.store.get_persona(persona_id)

    def find(self, name: str) -> StoredPersona:
        """By name, ignoring case; the error lists the personas there are."""
        self.default()
        found = self.store.find_persona(name)
        if found is None:
            known = ", ".join(p.name for p in self.store.personas())
            raise PersonaError(
                f"no persona named {name!r} (known: {known}; make one in the app with F5, "
                "or import a chat played as it)"
            )
        return found

    def for_name(self, name: str) -> StoredPersona:
        """The persona called `name`, made (without a description) if there is none: an
        imported chat keeps the name its user played under."""
        return self.store.find_persona(name) or self.store.create_persona(check_name(name))

    def create(
        self, name: str, description: str = "", picture: Path | None = None
    ) -> StoredPersona:
        image = store_image(self.store, picture) if picture is not None else None
        return self.store.create_persona(check_name(name), check_description(description), image)

    def update(
        self,
        persona_id: int,
        name: str,
        description: str,
        picture: Path | str | None = KEEP,
    ) -> StoredPersona:
        """Change a persona; `picture` is a new file, None to remove it, or KEEP."""
        current = self.store.get_persona(persona_id)
        if picture == KEEP:
            image = current.image
        elif isinstance(picture, Path):
            image = store_image(self.store, picture)
        else:
            image = None
        return self.store.update_persona(
            persona_id, check_name(name), check_description(description), image
        )

    def delete(self, persona_id: int) -> None:
        """Delete the persona, with the saved setup states made with it (derived_copies.py)."""
        name = self.store.get_persona(persona_id).name
        self.store.delete_persona(persona_id)
        DerivedCopies().forget_persona(name)

    def make_default(self, persona_id: int) -> StoredPersona:
        return self.store.set_default_persona(persona_id)

    def picture(self, persona: StoredPersona) -> tuple[bytes, str] | None:
        """The picture's bytes and type, or None."""
        return self.store.get_image(persona.image) if persona.image else None

    def uses(self, persona_id: int) -> int:
        """How many conversations are played as the persona."""
        return self.store.persona_conversations(persona_id)
