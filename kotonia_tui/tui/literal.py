"""The one way a string reaches a widget: as literal `Content`, never as markup.

Textual parses a plain `str` as markup almost everywhere it takes one (`Static`, `Label`,
`update`, `notify`, border titles, button labels, `DataTable` cells): a card description
starting with `[Name's Personality= ...]` raises `MarkupError`, `[/OOC]` closes a tag that was
never opened, and `[@click=app.quit]` becomes a live link. So widgets in `tui/` are given
`Content` built here, from text passed through `terminal_text.visible` (escape sequences and
bidi controls shown, not obeyed), and notifications go through `notify` with markup off.
`tests/tui/test_untrusted_text.py` walks every screen with hostile cards and fails if any of
their text reaches Textual's markup parser or shows a control character.
"""

from __future__ import annotations

from typing import Literal

from rich.text import Text
from textual.content import Content
from textual.dom import DOMNode
from textual.markup import escape

from kotonia_tui.terminal_text import visible

Severity = Literal["information", "warning", "error"]


def literal(text: str, style: str = "") -> Content:
    """`text` exactly as written (control characters made visible), in `style`."""
    return Content.styled(visible(text), style) if style else Content(visible(text))


def literal_line(text: str, style: str = "") -> Content:
    """Like `literal`, on one line: line breaks and tabs shown as ␊ and ␉ (titles, lists)."""
    shown = visible(text, one_line=True)
    return Content.styled(shown, style) if style else Content(shown)


def literal_cell(text: str) -> Text:
    """A `DataTable` cell shown literally, on one line (a `str` cell would be parsed as markup;
    a rich `Text` is measured for the column width, which `Content` is not)."""
    return Text(visible(text, one_line=True), end="")


def markup_escaped(text: str) -> str:
    """For the few Textual APIs typed to take a markup `str` (the palette's help line):
    `text` on one line with its square brackets escaped, so it is shown as written."""
    return escape(visible(text, one_line=True))


def notify(
    node: DOMNode,
    message: str,
    *,
    title: str = "",
    severity: Severity = "information",
    timeout: float | None = None,
) -> None:
    """A toast whose message and title are shown literally (they often name a card or a file)."""
    node.app.notify(
        visible(message),
        title=visible(title, one_line=True),
        severity=severity,
        timeout=timeout,
        markup=False,
    )
