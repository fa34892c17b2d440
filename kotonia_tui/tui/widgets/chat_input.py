"""The message box: multi-line, Enter sends, Shift+Enter or Ctrl+J starts a new line."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import TextArea


class ChatInput(TextArea):
    """A TextArea where Enter sends (remappable binding id `send`)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "submit", "Send", id="send", priority=True),
        Binding(
            "shift+enter,ctrl+j,alt+enter",
            "newline",
            "New line",
            id="newline",
            show=False,
            priority=True,
        ),
    ]

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(
            id=id,
            soft_wrap=True,
            show_line_numbers=False,
            tab_behavior="focus",
            compact=False,
            highlight_cursor_line=False,
            placeholder="Write a message…  Enter sends · Shift+Enter or Ctrl+J for a new line",
        )

    def action_submit(self) -> None:
        self.post_message(self.Submitted(self.text))

    def action_newline(self) -> None:
        self.insert("\n")
