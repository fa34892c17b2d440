"""A turn's lore: the card's lorebook and the World Info files attached, in one budget.

World Info files are SillyTavern lorebooks saved as JSON in one folder (the `world_info_dir`
setting, "worlds" under the data dir by default), attached by file name to a character or to
a conversation (their `ChatSettings.world_info`). A file that cannot be read is left out of
the turn with a warning naming it and the field at fault; the conversation goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kotonia_tui.characters import (
    BookToMatch,
    CharacterCard,
    CharacterSetup,
    LoreSelection,
    RegexGuard,
    render_lore,
    select_from_books,
)
from kotonia_tui.characters.errors import FieldError
from kotonia_tui.characters.json_fields import decode_json_bytes
from kotonia_tui.characters.lore_selection import CARD_BOOK, timed_out_note
from kotonia_tui.characters.lorebook import Lorebook
from kotonia_tui.characters.world_info import parse_world_info
from kotonia_tui.domain import Message, Persona
from kotonia_tui.regular_files import FileTooLarge, ReadError, read_regular

log = logging.getLogger(__name__)

LORE_SCAN_MESSAGES = 8
MAX_WORLD_INFO_BYTES = 32 * 2**20


class WorldInfoError(Exception):
    """A World Info file that cannot be used; the message names it and why, on one line."""


class WorldInfoFolder:
    """The World Info files of one folder, read once per change of the file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._books: dict[str, tuple[tuple[int, int], Lorebook]] = {}

    def names(self) -> list[str]:
        """The `.json` files in the folder, by name (none while the folder does not exist)."""
        try:
            found = [
                p.name
                for p in self.folder.iterdir()
                if p.suffix.lower() == ".json" and not p.name.startswith(".") and p.is_file()
            ]
        except OSError:
            return []
        return sorted(found, key=str.casefold)

    def path_of(self, name: str) -> Path:
        if not name or Path(name).name != name or name in (".", ".."):
            raise WorldInfoError(f"{name!r}: not a file name in {self.folder}")
        return self.folder / name

    def load(self, name: str) -> Lorebook:
        path = self.path_of(name)
        try:
            stat = path.stat()
        except OSError as exc:
            raise WorldInfoError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
        stamp = (stat.st_mtime_ns, stat.st_size)
        cached = self._books.get(name)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            data = read_regular(path, MAX_WORLD_INFO_BYTES)  # never a FIFO or a device
        except FileTooLarge as exc:
            raise WorldInfoError(
                f"{path}: is larger than {MAX_WORLD_INFO_BYTES // 2**20} MB (the most a World "
                "Info file may have)"
            ) from exc
        except ReadError as exc:
            raise WorldInfoError(str(exc)) from exc
        try:
            obj, _replaced = decode_json_bytes(data)
            book = parse_world_info(obj, Path(name).stem)
        except (ValueError, FieldError) as exc:
            raise WorldInfoError(f"{path}: {exc}") from exc
        self._books[name] = (stamp, book)
        return book


@dataclass(frozen=True)
class LoreTurn:
    """What a turn's lore is: the text after the history, and the report behind it."""

    text: str
    selection: LoreSelection
    books: tuple[str, ...]  # the books matched: "card" and World Info file names
    warnings: tuple[str, ...] = ()

    @property
    def notice(self) -> str | None:
        """Said when entries that fired were left out for the budget."""
        left_out = [f.label for f in self.selection.fired if not f.sent and f.tokens]
        if not left_out:
            return None
        return f"lorebook entries left out this turn (over the lore budget): {', '.join(left_out)}"


@dataclass
class LoreMatcher:
    """Chooses each turn's entries; remembers the regex keys turned off per book."""

    world_info: WorldInfoFolder
    count_tokens: Callable[[str], int]
    _guards: dict[tuple[str, str], RegexGuard] = field(default_factory=dict)
    _cuts_said: set[tuple[str, str]] = field(default_factory=set)  # (card, why it stopped)

    def for_turn(
        self,
        card: CharacterCard,
        setup: CharacterSetup,
        persona: Persona,
        window: Sequence[Message],
        budget: int,
        files: Sequence[str],
    ) -> LoreTurn:
        warnings: list[str] = []
        books: list[BookToMatch] = []
        if card.character_book is not None:
            guard = self._guards.setdefault((card.key, card.card_hash), RegexGuard())
            books.append(
                BookToMatch(
                    CARD_BOOK, card.character_book, not setup.constant_lore_in_system, guard
                )
            )
        for name in files:
            try:
                book = self.world_info.load(name)
            except WorldInfoError as exc:
                warnings.append(f"World Info left out this turn: {exc}")
                log.warning("%s", warnings[-1])
                continue
            guard = self._guards.setdefault(("", name), RegexGuard())
            books.append(BookToMatch(name, book, True, guard))
        names = tuple(b.name for b in books)
        if not books or budget <= 0:
            return LoreTurn("", LoreSelection(budget=budget), names, tuple(warnings))
        texts = [m.text for m in window[-LORE_SCAN_MESSAGES:]]
        selection = select_from_books(books, texts, self.count_tokens, budget)
        for entry, key in selection.timed_out:
            warnings.append(timed_out_note(setup.display_name, entry, key))
            log.warning("card %s: %s", card.key, warnings[-1])
        if selection.cut is not None:
            # Logged every turn it happens (the inspector shows it too); said once per card and
            # reason, since a book that multiplies does so on every turn that sets it off (the
            # counts differ from turn to turn with the time it had).
            cut = f"lorebook of {setup.display_name}: {selection.cut.text()}"
            log.warning("card %s: %s", card.key, cut)
            if (card.key, selection.cut.reason) not in self._cuts_said:
                self._cuts_said.add((card.key, selection.cut.reason))
                warnings.append(cut)
        # A MacroLimitError (entries too large once filled in) is the caller's to report.
        text = render_lore(selection.entries, char=setup.display_name, user=persona.name)
        return LoreTurn(text, selection, names, tuple(warnings))
