"""The base of Kotonia's own screens: typed access to the app they run in."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from textual.screen import Screen

if TYPE_CHECKING:
    from kotonia_tui.tui.app import KotoniaApp

ResultT = TypeVar("ResultT")


class KotoniaScreen(Screen[ResultT]):
    """A screen of the Kotonia app (`self.kotonia` is `self.app`, typed)."""

    @property
    def kotonia(self) -> KotoniaApp:
        from kotonia_tui.tui.app import KotoniaApp  # the app module imports the screens

        app = self.app
        if not isinstance(app, KotoniaApp):
            raise TypeError(f"{type(self).__name__} runs only in the Kotonia app, not {app!r}")
        return app
