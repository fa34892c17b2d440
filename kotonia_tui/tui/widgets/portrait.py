"""A character's picture: drawn with textual-image where the terminal can, a monogram otherwise.

textual-image picks the best method when it is imported (Sixel, the Kitty graphics protocol,
coloured half cells on any true-colour terminal, plain Unicode shades when not on a terminal), so
this module is imported before the app starts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from PIL import Image as PILImage
from textual.app import ComposeResult
from textual.containers import Container
from textual.widget import Widget
from textual.widgets import Static

from kotonia_tui.characters.card import CardImage
from kotonia_tui.image_files import decode_thumbnail
from kotonia_tui.lazy import numpy_hidden
from kotonia_tui.tui.literal import literal_line

log = logging.getLogger(__name__)

TerminalImage: Callable[[PILImage.Image], Widget] | None
try:  # textual-image queries the terminal at import: it must happen before Textual starts.
    with numpy_hidden():  # numpy only speeds up its Sixel packing, by ~10%
        from textual_image.widget import Image as _TerminalImage
except Exception as exc:  # pragma: no cover - a terminal that cannot be queried
    log.info("pictures are off: textual-image is unavailable: %s", exc)
    TerminalImage = None
else:
    TerminalImage = _TerminalImage


def monogram(name: str) -> str:
    words = [w for w in name.replace("-", " ").split() if w]
    if not words:
        return "?"
    if len(words) == 1 or not words[0].isascii():
        return words[0][:2].upper() if words[0].isascii() else words[0][:1]
    return (words[0][0] + words[-1][0]).upper()


class Portrait(Container):
    """The picture of a card, or its initials in a frame when there is none or it cannot draw."""

    DEFAULT_CSS = """
    Portrait { height: 14; width: 28; }
    Portrait > .monogram {
        width: 100%; height: 100%; content-align: center middle;
        text-style: bold; color: $accent; border: round $accent 50%;
    }
    Portrait > Image { width: 100%; height: 100%; }
    """

    def __init__(
        self, image: CardImage | None, name: str, *, id: str | None = None, classes: str = ""
    ) -> None:
        super().__init__(id=id, classes=classes)
        self._card_image = image
        self._card_name = name

    def compose(self) -> ComposeResult:
        picture = self._open()
        if picture is not None and TerminalImage is not None:
            try:
                yield TerminalImage(picture)
                return
            except Exception as exc:  # a picture the renderer cannot take
                log.info("cannot draw the picture of %s: %s", self._card_name, exc)
        yield Static(literal_line(monogram(self._card_name)), classes="monogram")

    def _open(self) -> PILImage.Image | None:
        if self._card_image is None:
            return None
        try:
            # One pixel bound for every picture; decoded at the size it is shown.
            return decode_thumbnail(self._card_image.data)
        except Exception as exc:
            log.info("the picture of %s cannot be read: %s", self._card_name, exc)
            return None
