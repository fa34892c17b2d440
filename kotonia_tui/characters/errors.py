"""Errors raised while reading or writing character cards.

Every problem a user can cause with a card file becomes a `CardError` whose message is one line:
the file name, then the field (a dotted JSON path such as `data.alternate_greetings[2]`) or the
part of the file that is wrong, then what is wrong. The CLI and the TUI print it as is.
"""

from __future__ import annotations

from pathlib import Path


class CardError(Exception):
    """A card file that cannot be used. `str(err)` is `"<file name>: <detail>"` on one line."""

    def __init__(self, path: Path | str, detail: str) -> None:
        self.path = Path(path)
        # One line, always: details sometimes quote parser messages that carry newlines.
        self.detail = " ".join(detail.split())
        super().__init__(f"{self.path.name}: {self.detail}")


class CardShadowed(CardError):
    """Not a broken card: another file with the same key was preferred (see `load_cards`)."""


class CardRepaired(CardError):
    """Not a broken card: it loaded, but something in it was repaired (invalid Unicode became
    U+FFFD, or a Character's Note written otherwise was read as SillyTavern reads it); said
    once so the user knows why a name shows a replacement character, or why the note is placed
    where it is or not at all. One per card: its repairs joined by "; "."""


class FieldError(ValueError):
    """A JSON field with a wrong value; the loader turns it into a `CardError` naming the file."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}" if field else problem)
