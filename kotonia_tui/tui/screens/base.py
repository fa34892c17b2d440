"""The base of Kotonia's own screens: typed access to the app they run in."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar, TypeVar

from textual.binding import ActiveBinding
from textual.screen import Screen

if TYPE_CHECKING:
    from kotonia_tui.tui.app import KotoniaApp

ResultT = TypeVar("ResultT")


# Below this width a screen's footer keeps only the keys a newcomer needs first (the rest stay
# in the palette, Ctrl+P, and the help, F1): at 80 columns it used to lose Back, Quit and Help.
NARROW = 100


class KotoniaScreen(Screen[ResultT]):
    """A screen of the Kotonia app (`self.kotonia` is `self.app`, typed)."""

    # The binding ids the footer keeps below NARROW columns (None: all of them).
    FOOTER_WHEN_NARROW: ClassVar[frozenset[str] | None] = None

    @property
    def active_bindings(self) -> dict[str, ActiveBinding]:
        bindings = super().active_bindings
        keep = self.FOOTER_WHEN_NARROW
        if keep is None or self.size.width >= NARROW:
            return bindings
        return {
            key: active._replace(binding=replace(active.binding, show=False))
            if active.binding.show and active.binding.id not in keep
            else active
            for key, active in bindings.items()
        }

    def on_resize(self) -> None:
        self.refresh_bindings()

    @property
    def kotonia(self) -> KotoniaApp:
        from kotonia_tui.tui.app import KotoniaApp  # the app module imports the screens

        app = self.app
        if not isinstance(app, KotoniaApp):
            raise TypeError(f"{type(self).__name__} runs only in the Kotonia app, not {app!r}")
        return app
