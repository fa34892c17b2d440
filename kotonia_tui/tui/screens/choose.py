"""A list to choose one item from (who speaks next, a quick reply, the reply order): Enter
or the item's number (1-9) picks, Esc cancels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, ListItem, ListView, Static

from kotonia_tui.tui.literal import literal, literal_line


class ChoiceItem(ListItem):
    def __init__(self, value: str, label: str) -> None:
        super().__init__(Label(literal(label)))
        self.value = value


class ChooseScreen(ModalScreen[str | None]):
    """`choices` as (value, label); dismissed with the value picked, or None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="choose_cancel"),
    ]

    def __init__(
        self,
        title: str,
        choices: Sequence[tuple[str, str]],
        hint: str = "",
        *,
        current: str | None = None,
    ) -> None:
        super().__init__()
        self.heading = title
        self.choices = list(choices)
        self.hint = hint
        self.current = current  # the value highlighted first (the one in force), if any

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as box:
            box.border_title = literal_line(self.heading)
            yield ListView(*(ChoiceItem(v, label) for v, label in self.choices), id="choices")
            yield Static(self.hint or "Enter or 1-9 picks · Esc cancels", classes="hint")

    def on_mount(self) -> None:
        listing = self.query_one("#choices", ListView)
        values = [value for value, _label in self.choices]
        if self.current in values:
            listing.index = values.index(self.current)
        listing.focus()

    def on_list_view_selected(self, event: ListView.Selected) -> None:
        event.stop()
        item = event.item
        if isinstance(item, ChoiceItem):
            self.dismiss(item.value)

    def on_key(self, event: events.Key) -> None:
        # A number picks the item at once: Alt+Q then 1 works in every terminal, where Alt+1
        # does not (tmux and macOS's Option key turn it into a character such as "¡").
        if event.character is not None and event.character in tuple("123456789"):
            number = int(event.character)
            if number <= len(self.choices):
                event.stop()
                self.dismiss(self.choices[number - 1][0])

    def action_cancel(self) -> None:
        self.dismiss(None)
