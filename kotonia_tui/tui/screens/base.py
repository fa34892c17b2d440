"""The base of Kotonia's own screens: typed access to the app they run in."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar, TypeVar, cast

from rich.cells import cell_len
from textual.binding import ActiveBinding, Binding
from textual.screen import Screen

if TYPE_CHECKING:
    from kotonia_tui.tui.app import KotoniaApp

ResultT = TypeVar("ResultT")


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
        # The footer's right end: the command palette's key, docked there by Textual's Footer.
        palette = bindings.get(self.app.COMMAND_PALETTE_BINDING)
        room = self.size.width - (self._footer_width(palette.binding) if palette else 0)
        fits: set[str] = set()  # actions: the footer shows one key per action
        for active in in_order:
            binding = active.binding
            if binding.action in fits:
                continue
            width = self._footer_width(binding)
            if width <= room:
                room -= width
                fits.add(binding.action)
            elif binding.id not in first:
                # The rest stop at the first that does not fit: a narrower key after it took
                # its place (at 120 columns Ctrl+N Branch took F9 Settings').
                break
        return {
            key: active._replace(binding=replace(active.binding, show=False))
            if active.binding.show and active.binding.action not in fits
            else active
            for key, active in bindings.items()
        }

    def _footer_width(self, binding: Binding) -> int:
        """The columns a key takes in the footer: its key and its description, one space of
        padding around each (the palette's key too: 12 columns for "^p palette")."""
        return cell_len(self.app.get_key_display(binding)) + cell_len(binding.description) + 3

    def on_resize(self) -> None:
        self.refresh_bindings()

    @property
    def kotonia(self) -> KotoniaApp:
        # A cast, not a runtime import: the app module imports the screens, and a Kotonia
        # screen is only ever pushed by the Kotonia app.
        return cast("KotoniaApp", self.app)
