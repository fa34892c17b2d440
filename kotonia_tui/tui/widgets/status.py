"""The status line: model loading, the turn in progress, and the fold worker's state."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static


class StatusLine(Static):
    """One line under every screen. The app owns the texts; this shows them."""

    DEFAULT_CSS = """
    StatusLine {
        height: 1; padding: 0 1;
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
            # One line, always: redraw it without laying out the whole screen again.
            self.update(content, layout=False)


def join_status(items: list[Content]) -> Content:
    return Content("  │  ").join([i for i in items if i.plain])
