"""The message box: multi-line, Enter sends, Shift+Enter or Ctrl+J starts a new line.

On an empty box, ← and → page through the last reply's versions and → on the newest writes
another (SillyTavern's swipes), and Ctrl+Z brings back a message deleted this session; with
text in the box they move the cursor and undo typing, as in any text box.
"""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import TextArea

from kotonia_tui.terminal_text import visible


class ChatInput(TextArea):
    """A TextArea where Enter sends (remappable binding id `send`)."""

    # Not priority bindings: a priority binding fires as soon as the app reads the key, while
    # the characters typed just before it may still wait in this widget's queue, so a fast
    # typist (or a paste followed by Enter) would send half a message. The keys are matched
    # in `_on_key` instead, in order with the typing; the bindings give ids, remapping and
    # the footer.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "submit", "Send", id="send"),
        Binding(
            "shift+enter,ctrl+j,alt+enter",
            "newline",
            "New line",
            id="newline",
            show=False,
        ),
    ]

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    class Swipe(Message):
        """← (-1) or → (+1) on an empty box: another version of the last reply."""

        def __init__(self, step: int) -> None:
            super().__init__()
            self.step = step

    class UndoDelete(Message):
        """Ctrl+Z on an empty box; `undo_typing` is the box's own undo, if the screen passes."""

        def __init__(self, box: ChatInput) -> None:
            super().__init__()
            self.box = box

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(
            id=id,
            soft_wrap=True,
            show_line_numbers=False,
            tab_behavior="focus",
            compact=False,
            highlight_cursor_line=False,
            placeholder="Write a message… (Enter sends · Ctrl+J new line)",
        )

    async def _on_key(self, event: events.Key) -> None:
        actions = {b.action for b in self._bindings.key_to_bindings.get(event.key, [])}
        if "submit" in actions or "newline" in actions:
            event.stop()
            event.prevent_default()
            if "submit" in actions:
                self.action_submit()
            else:
                self.action_newline()
            return
        await super()._on_key(event)

    async def _on_paste(self, event: events.Paste) -> None:
        # A paste (from a web page, a log) can carry escape sequences; the box would draw them
        # raw on the terminal. They are pasted as their pictures (␛), like everywhere else.
        event.text = visible(event.text)
        await super()._on_paste(event)

    def action_submit(self) -> None:
        self.post_message(self.Submitted(self.text))

    def action_newline(self) -> None:
        self.insert("\n")

    # Bound by TextArea to ←, →, Ctrl+Z. As actions (not key handlers) they run in order with
    # the typing, so a key typed just before the arrow is in the box when it is looked at.
    def action_cursor_left(self, select: bool = False) -> None:
        if not select and not self.text:
            self.post_message(self.Swipe(-1))
            return
        super().action_cursor_left(select)

    def action_cursor_right(self, select: bool = False) -> None:
        if not select and not self.text:
            self.post_message(self.Swipe(1))
            return
        super().action_cursor_right(select)

    def action_undo(self) -> None:
        if not self.text:
            self.post_message(self.UndoDelete(self))
            return
        super().action_undo()

    def undo_typing(self) -> None:
        super().action_undo()
