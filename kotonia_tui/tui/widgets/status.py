"""The status line: model loading, the turn in progress, and the fold worker's state."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from kotonia_tui.tui.widgets.repaint import update_static


class StatusLine(Static):
    """One line under every screen. The app owns the texts; this shows them."""

    # Wraps rather than cuts (a long model error or path is read in full), up to four lines.
    DEFAULT_CSS = """
    StatusLine {
        height: auto; max-height: 4; padding: 0 1;
        background: $panel; color: $text-muted;
    }
    """

    def on_mount(self) -> None:
        self.refresh_status()

    def refresh_status(self) -> None:
        app = self.app
        parts = getattr(app, "status_parts", None)
        if callable(parts):
            content = parts(self.screen)
            shown = self.content
            if (
                isinstance(shown, Content)
                and shown.plain == content.plain
                and shown.spans == content.spans
            ):
                return
            # Usually the same height: redrawn without laying out the whole screen again.
            update_static(self, content)


def join_status(items: list[Content]) -> Content:
    return Content("  │  ").join([i for i in items if i.plain])
