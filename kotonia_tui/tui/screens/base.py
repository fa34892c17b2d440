"""The base of Kotonia's own screens: typed access to the app they run in."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar, TypeVar, cast

from textual.binding import ActiveBinding
from textual.screen import Screen

if TYPE_CHECKING:
    from kotonia_tui.tui.app import KotoniaApp

ResultT = TypeVar("ResultT")


# The footer's right end: the command palette's key, docked there by Textual's Footer.
PALETTE_ROOM = 14


class KotoniaScreen(Screen[ResultT]):
    """A screen of the Kotonia app (`self.kotonia` is `self.app`, typed)."""

    # The binding ids the footer shows before any other, in any width (None: the footer shows
    # every binding, as Textual does). The rest follow in their own order while they fit: at
    # 80 columns the footer used to lose Back, Quit and Help, and at 120 still Help.
    FOOTER_FIRST: ClassVar[frozenset[str] | None] = None

    @property
    def active_bindings(self) -> dict[str, ActiveBinding]:
        bindings = super().active_bindings
        first = self.FOOTER_FIRST
        if first is None or not self.size.width:
            return bindings
        shown = [active for active in bindings.values() if active.binding.show]
        in_order = sorted(shown, key=lambda active: active.binding.id not in first)
        room = self.size.width - PALETTE_ROOM
        fits: set[str] = set()  # actions: the footer shows one key per action
        for active in in_order:
            binding = active.binding
            if binding.action in fits:
                continue
            # A footer key is its key and its description, one space of padding around each.
            width = len(self.app.get_key_display(binding)) + len(binding.description) + 3
            if width <= room:
                room -= width
                fits.add(binding.action)
        return {
            key: active._replace(binding=replace(active.binding, show=False))
            if active.binding.show and active.binding.action not in fits
            else active
            for key, active in bindings.items()
        }

    def on_resize(self) -> None:
        self.refresh_bindings()

    @property
    def kotonia(self) -> KotoniaApp:
        # A cast, not a runtime import: the app module imports the screens, and a Kotonia
        # screen is only ever pushed by the Kotonia app.
        return cast("KotoniaApp", self.app)
