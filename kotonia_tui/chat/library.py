"""The character cards the app can offer: the shipped folder and the user's folder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kotonia_tui.characters import (
    CARD_SUFFIXES,
    DEFAULT_SYSTEM_PROMPT,
    CardError,
    CardRepaired,
    CardShadowed,
    CharacterCard,
    CharacterSetup,
    load_cards,
    render_setup,
)
from kotonia_tui.characters.expressions import Expression, load_expressions
from kotonia_tui.chat.errors import UnknownCharacterError
from kotonia_tui.domain import Persona
from kotonia_tui.memory.segments import FORMAT_INSTRUCTION

SYSTEM_PROMPT = f"{DEFAULT_SYSTEM_PROMPT} {FORMAT_INSTRUCTION}"


def shipped_characters_dir() -> Path:
    """The sample cards that come with the app (the repository's `characters/` folder)."""
    return Path(__file__).resolve().parents[2] / "characters"


class CharacterLibrary:
    """Cards from several folders (later folders win on the same key), with their setups."""

    def __init__(self, folders: Sequence[Path]) -> None:
        self.folders = list(folders)
        self.cards: list[CharacterCard] = []
        self.problems: list[CardError] = []
        self._setups: dict[tuple[str, str, str], CharacterSetup] = {}
        self._expressions: dict[tuple[str, str], tuple[list[Expression], list[str]]] = {}
        self.reload()

    def reload(self) -> list[CardError]:
        cards, problems = load_cards([f for f in self.folders if f.is_dir()])
        self.cards = cards
        self.problems = problems
        self._setups.clear()
        return problems

    @property
    def errors(self) -> list[CardError]:
        """Broken cards (not the notes about a user card replacing a shipped one)."""
        return [p for p in self.problems if not isinstance(p, CardShadowed | CardRepaired)]

    @property
    def repairs(self) -> list[CardError]:
        """Cards that loaded with something repaired (invalid Unicode, a Character's Note read as
        SillyTavern reads it), one note a card, to be said once."""
        return [p for p in self.problems if isinstance(p, CardRepaired)]

    def get(self, key: str) -> CharacterCard:
        for card in self.cards:
            if card.key == key:
                return card
        raise UnknownCharacterError(self._unknown(key))

    def find(self, name: str) -> CharacterCard:
        """By key, name or nickname, case-insensitively."""
        wanted = name.casefold().strip()
        for card in self.cards:
            if wanted in (card.key.casefold(), card.name.casefold()):
                return card
            if card.nickname and card.nickname.casefold() == wanted:
                return card
        # A unique prefix of a key or a name is enough ("rowan" for rowan-ashby).
        matches = [
            card
            for card in self.cards
            if card.key.casefold().startswith(wanted) or card.name.casefold().startswith(wanted)
        ]
        if wanted and len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            keys = ", ".join(card.key for card in matches)
            raise UnknownCharacterError(f"{name!r} matches several characters: {keys}")
        raise UnknownCharacterError(self._unknown(name))

    def match(self, name: str) -> CharacterCard | None:
        """The one card a chat file's character name means: by key, then by name or nickname
        (case-insensitive, surrounding space ignored); None when no card or several match."""
        wanted = " ".join(name.split()).casefold()
        if not wanted:
            return None
        for field in ("key", "name", "nickname"):
            found = [
                card
                for card in self.cards
                if " ".join((getattr(card, field) or "").split()).casefold() == wanted
            ]
            if len(found) == 1:
                return found[0]
            if found:
                return None  # several cards by that name: the user must say which
        return None

    def card_of(self, key: str, name: str) -> CharacterCard | None:
        """A conversation's card: by its key; for a conversation filed under a character's
        name (imported before chats were matched to cards), by that name."""
        try:
            return self.get(key)
        except LookupError:
            return self.match(name) or self.match(key)

    def error_of(self, key: str) -> CardError | None:
        """Why the card file with this key (its file stem) could not be read, if one could not:
        the loader's one line, file then field then what is wrong. The exact stem first, then
        one differing only in case (as `card_of` matches a key); a folder that could not be
        listed is not a card file. Reads no file: the problems of the last load."""
        files = [
            problem
            for problem in reversed(self.errors)  # the later folder (the user's) is the one used
            if problem.path.suffix.lower() in CARD_SUFFIXES
        ]
        for problem in files:
            if problem.path.stem == key:
                return problem
        wanted = key.casefold()
        for problem in files:
            if problem.path.stem.casefold() == wanted:
                return problem
        return None

    def _unknown(self, name: str) -> str:
        known = ", ".join(card.key for card in self.cards) or "none"
        return f"no character card named {name!r} (known: {known})"

    def expressions(self, card: CharacterCard) -> tuple[list[Expression], list[str]]:
        """The card's expression pictures and the problems reading them (read once per card
        file: a CHARX card can be large)."""
        key = (card.key, card.card_hash)
        if key not in self._expressions:
            self._expressions[key] = load_expressions(card)
        return self._expressions[key]

    def setup(self, card: CharacterCard, persona: Persona) -> CharacterSetup:
        key = (card.key, persona.name, persona.description)
        if key not in self._setups:
            self._setups[key] = render_setup(card, persona, default_system_prompt=SYSTEM_PROMPT)
        return self._setups[key]
