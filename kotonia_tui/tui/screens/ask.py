"""A one-line question: a title for a conversation, a name. Enter answers, Esc cancels."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from kotonia_tui.terminal_text import visible
from kotonia_tui.tui.literal import literal, literal_line


class AskTextScreen(ModalScreen[str | None]):
    """Returns the text typed (None: cancelled)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="ask_cancel"),
    ]

    def __init__(self, title: str, question: str, value: str = "") -> None:
        super().__init__()
        self.dialog_title = title
        self.question = question
        self.value = value

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as box:
            box.border_title = literal_line(self.dialog_title)
            yield Static(literal(self.question))
            # The value may be a stored title: shown as its visible text, never raw escapes.
            yield Input(visible(self.value, one_line=True), id="ask-text")
            with Horizontal(classes="buttons"):
                yield Button("OK", variant="primary", id="ok")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#ask-text", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "ok":
            self.dismiss(self.query_one("#ask-text", Input).value)
        else:
            self.dismiss(None)
