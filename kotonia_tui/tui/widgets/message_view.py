"""One message in the chat log: a header (speaker, number, versions) and the text as written.

A message is one widget: the header, the body, the images note and the status line are
assembled into a single `Content`. Textual lays out the whole screen whenever a widget's
height may change (every widget is arranged again, whatever moved is repainted); with one widget
per message, not one per header, body, images note and status, a chat of a hundred messages is
a hundred widgets there, not four hundred.

The body is the text as written, line breaks kept, *actions*, `thoughts` and "speech" styled
in place (`render.message_body`); the speaker's name is in the header once.

While a reply streams, text arrives token by token; the view keeps the raw text, restyles it
(a regex over one reply: microseconds) and repaints at most every 50 ms, so a fast
model never floods the event loop with repaints. A repaint that leaves the reply as tall as it
was (the last line grew) asks for no layout at all: only this widget is redrawn.
"""

from __future__ import annotations

from textual.content import Content
from textual.timer import Timer
from textual.widgets import Static

from kotonia_tui.chat.replies import join_continuation
from kotonia_tui.domain import MessageStatus, Role, StoredMessage
from kotonia_tui.tui.literal import literal, literal_line
from kotonia_tui.tui.render import message_body, status_content
from kotonia_tui.tui.widgets.repaint import update_static

FLUSH_INTERVAL_S = 0.05
NEWLINE = Content("\n")


class MessageView(Static):
    """A stored message, or a reply being written."""

    DEFAULT_CSS = """
    MessageView {
        height: auto; padding: 0 1; margin: 0 0 1 0;
        border-left: wide $accent 60%;
    }
    MessageView.-user { border-left: wide $primary 60%; background: $primary 6%; }
    MessageView.-system { border-left: wide $panel-lighten-2; color: $text-muted; }
    MessageView.-selected { border-left: wide $warning; background: $boost; }
    MessageView.-cut { border-left: wide $warning 70%; }
    MessageView.-error { border-left: wide $error; }
    """

    def __init__(
        self,
        message: StoredMessage | None,
        *,
        number: int | None = None,
        speaker: str = "",
        role: Role = Role.CHARACTER,
    ) -> None:
        self.role = message.role if message is not None else role
        super().__init__(classes=f"-{self.role.value}" if self.role is not Role.CHARACTER else "")
        self.message = message
        self.number = number  # the message's place in its conversation (1 = the first)
        self.speaker = message.speaker if message is not None else speaker
        self.streaming = message is None
        self._stream_prefix = ""
        self._stream_text = ""
        self._flush_timer: Timer | None = None
        self._error: str | None = None
        self._note = ""
        # Kept between repaints of a streaming body: the header line, and under the body the
        # images note and the status line.
        self._header = Content("")
        self._footer: list[Content] = []
        self._paint()

    @property
    def message_id(self) -> int | None:
        return self.message.id if self.message is not None else None

    @property
    def label(self) -> str:
        """How the message is named to the user: "#3" for the third of its conversation."""
        return f"#{self.number}" if self.number is not None else "this message"

    def renumber(self, number: int) -> None:
        self.number = number
        self._paint()

    @property
    def text(self) -> str:
        if self.streaming:
            return join_continuation(self._stream_prefix, self._stream_text)
        return self.message.text if self.message is not None else ""

    # ---- streaming -------------------------------------------------------------------------

    def start_stream(self, prefix: str = "", note: str = "") -> None:
        """Show a reply being written (after `prefix`, for a continued reply)."""
        self.streaming = True
        self._stream_prefix = prefix
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

    def finish(self, message: StoredMessage | None, error: str | None = None) -> None:
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

    def set_message(self, message: StoredMessage) -> None:
        self.message = message
        self.streaming = False
        self._error = None
        self._paint()

    # ---- painting --------------------------------------------------------------------------

    def _paint(self) -> None:
        self._header = self._header_content()
        self._footer = self._footer_lines()
        self._paint_body()

    def _header_content(self) -> Content:
        message = self.message
        name_style = "bold $accent" if self.role is Role.CHARACTER else "bold $primary"
        if self.role is Role.SYSTEM:
            # Imported system lines ("[Start a new chat]"): a note, not someone speaking.
            parts: list[str | tuple[str, str] | Content] = [("system note", "italic $text-muted")]
        else:
            parts = [literal_line(self.speaker or "…", name_style)]
        if self.number is not None and not self._note:
            parts.append((f"  #{self.number}", "$text-disabled"))
        if message is not None and len(message.alternatives) > 1 and not self.streaming:
            parts.append((f"  ‹ {message.chosen + 1}/{len(message.alternatives)} ›", "$secondary"))
        if message is not None and message.edited:
            parts.append(("  edited", "italic $text-muted"))
        if self.streaming:
            parts.append((f"  {self._note or 'writing…'}", "italic $accent"))
        return Content.assemble(*parts)

    def _paint_body(self) -> None:
        lines: list[Content]
        if self.streaming:
            text = join_continuation(self._stream_prefix, self._stream_text)
            lines = [message_body(text, self.role, streaming=True)]
        elif self.message is not None and self.message.text.strip():
            lines = [message_body(self.message.text, self.role)]
        elif self.message is not None:
            lines = [Content.styled("(empty reply)", "italic $text-disabled")]
        else:
            lines = []
        update_static(self, NEWLINE.join([self._header, *lines, *self._footer]))

    def _footer_lines(self) -> list[Content]:
        """The images note and the status line (why a reply did not end whole)."""
        message = self.message
        lines: list[Content] = []
        count = len(message.images) if message is not None else 0
        if count:
            lines.append(
                Content.styled(
                    f"📎 {count} image{'s' if count != 1 else ''} attached", "$text-muted"
                )
            )
        if self._error:
            lines.append(Content.assemble(("✗ ", "bold $error"), literal(self._error, "$error")))
        elif message is not None and not self.streaming:
            status = status_content(message)
            if status is not None:
                lines.append(status)
        cut = message is not None and message.status is not MessageStatus.COMPLETE
        self.set_class(cut and not self.streaming, "-cut")
        self.set_class(bool(self._error), "-error")
        return lines
