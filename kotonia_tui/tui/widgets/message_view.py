"""One message in the chat log: a header (speaker, versions, status) and its segments.

While a reply streams, text arrives token by token; the view keeps the raw text, re-splits it
into segments (a regex over one reply: microseconds) and repaints at most every 50 ms, so a fast
model never floods the event loop with repaints. Each segment is its own `Static`, and only the
ones that changed are updated: a long reply costs the layout of its last paragraph, not of the
whole reply, on each repaint.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.timer import Timer
from textual.widgets import Static

from kotonia_tui.domain import Message, MessageStatus, Role
from kotonia_tui.memory.segments import parse_segments
from kotonia_tui.tui.render import segment_content, status_content

FLUSH_INTERVAL_S = 0.05


class MessageView(Vertical):
    """A stored message, or a reply being written."""

    DEFAULT_CSS = """
    MessageView {
        height: auto; padding: 0 1; margin: 0 0 1 0;
        border-left: wide $accent 60%;
    }
    MessageView.-user { border-left: wide $primary 60%; background: $primary 6%; }
    MessageView.-selected { border-left: wide $warning; background: $boost; }
    MessageView.-cut { border-left: wide $warning 70%; }
    MessageView.-error { border-left: wide $error; }
    MessageView > .header { height: 1; color: $text-muted; }
    MessageView > .body { height: auto; }
    MessageView > .body > Static { height: auto; }
    MessageView > .status { height: auto; }
    MessageView > .images { height: auto; color: $text-muted; }
    """

    def __init__(
        self,
        message: Message | None,
        *,
        speaker: str = "",
        listener: str = "",
        role: Role = Role.CHARACTER,
    ) -> None:
        super().__init__()
        self.message = message
        self.role = message.role if message is not None else role
        self.speaker = message.speaker if message is not None else speaker
        self.listener = listener
        self.streaming = message is None
        self._stream_prefix = ""
        self._stream_text = ""
        self._flush_timer: Timer | None = None
        self._error: str | None = None
        self._note = ""

    # ---- composition -----------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(classes="header")
        yield Vertical(classes="body")
        yield Static(classes="images")
        yield Static(classes="status")

    def on_mount(self) -> None:
        self.set_class(self.role is Role.USER, "-user")
        self._paint()

    @property
    def message_id(self) -> int | None:
        return self.message.id if self.message is not None else None

    @property
    def text(self) -> str:
        if self.streaming:
            return self._stream_prefix + self._stream_text
        return self.message.text if self.message is not None else ""

    # ---- streaming -------------------------------------------------------------------------

    def start_stream(self, prefix: str = "", note: str = "") -> None:
        """Show a reply being written (after `prefix`, for a continued reply)."""
        self.streaming = True
        self._stream_prefix = prefix + (" " if prefix else "")
        self._stream_text = ""
        self._error = None
        self._note = note
        self._paint()

    def append(self, text: str) -> None:
        self._stream_text += text
        if self._flush_timer is None:
            self._flush_timer = self.set_timer(FLUSH_INTERVAL_S, self._flush)

    def _flush(self) -> None:
        self._flush_timer = None
        self._paint_body()

    def finish(self, message: Message | None, error: str | None = None) -> None:
        """The turn ended: show the stored message (or keep the old one and show the error)."""
        if self._flush_timer is not None:
            self._flush_timer.stop()
            self._flush_timer = None
        self.streaming = False
        self._note = ""
        if message is not None:
            self.message = message
        self._error = error
        self._paint()

    def set_message(self, message: Message) -> None:
        self.message = message
        self.streaming = False
        self._error = None
        self._paint()

    # ---- painting --------------------------------------------------------------------------

    def _paint(self) -> None:
        if not self.children:
            return
        self._paint_header()
        self._paint_body()
        self._paint_status()

    def _paint_header(self) -> None:
        message = self.message
        name_style = "bold $accent" if self.role is Role.CHARACTER else "bold $primary"
        parts: list[str | tuple[str, str] | Content] = [(self.speaker or "…", name_style)]
        if message is not None and message.id is not None and not self._note:
            parts.append((f"  #{message.id}", "$text-disabled"))
        if message is not None and len(message.alternatives) > 1 and not self.streaming:
            parts.append((f"  ‹ {message.chosen + 1}/{len(message.alternatives)} ›", "$secondary"))
        if message is not None and message.edited:
            parts.append(("  edited", "italic $text-muted"))
        if self.streaming:
            parts.append((f"  {self._note or 'writing…'}", "italic $accent"))
        self.query_one(".header", Static).update(Content.assemble(*parts))

    def _paint_body(self) -> None:
        if not self.children:
            return
        lines: list[Content]
        if self.streaming:
            text = self._stream_prefix + self._stream_text
            segments = parse_segments(text, speaker=self.speaker, listener=self.listener)
            lines = [segment_content(s, self.role) for s in segments]
            cursor = Content.styled(" ▍", "$accent")
            lines = [*lines[:-1], lines[-1].append(cursor)] if lines else [cursor]
        elif self.message is not None and self.message.text.strip():
            segments = self.message.segments or parse_segments(
                self.message.text, speaker=self.speaker, listener=self.listener
            )
            lines = [segment_content(s, self.role) for s in segments]
        elif self.message is not None:
            lines = [Content.styled("(empty reply)", "italic $text-disabled")]
        else:
            lines = []
        body = self.query_one(".body", Vertical)
        shown = list(body.children)
        for index, line in enumerate(lines):
            if index < len(shown):
                static = shown[index]
                if getattr(static, "shown_line", None) != line:
                    assert isinstance(static, Static)
                    static.update(line)
                    static.shown_line = line  # type: ignore[attr-defined]
            else:
                static = Static(line)
                static.shown_line = line  # type: ignore[attr-defined]
                body.mount(static)
        for extra in shown[len(lines) :]:
            extra.remove()

    def _paint_status(self) -> None:
        message = self.message
        status: Content | None = None
        if self._error:
            status = Content.assemble(("✗ ", "bold $error"), (self._error, "$error"))
        elif message is not None and not self.streaming:
            status = status_content(message)
        status_widget = self.query_one(".status", Static)
        status_widget.update(status or "")
        status_widget.display = status is not None
        images = self.query_one(".images", Static)
        count = len(message.images) if message is not None else 0
        images.update(f"📎 {count} image{'s' if count != 1 else ''} attached" if count else "")
        images.display = bool(count)
        cut = message is not None and message.status is not MessageStatus.COMPLETE
        self.set_class(cut and not self.streaming, "-cut")
        self.set_class(bool(self._error), "-error")
