"""Updating a `Static` without laying out the whole screen when its height stays the same.

`Static.update` asks for a layout by default, because new content may change the widget's size.
In Textual a layout is always of the whole screen: every widget is arranged again and whatever
moved is repainted. For text that changes often (a streaming reply, a running fold's clock) that
is most of the cost of a frame. When the new content wraps to as many lines as the widget shows
now, a repaint of the widget alone is enough.
"""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static


def update_static(widget: Static, content: Content) -> None:
    """Show `content` in `widget`; ask for a layout only if its height would change.

    For widgets whose width does not depend on their content (block widgets in a vertical
    layout: the message views, the inspector's sections). Before the first layout the widget has
    no size yet, and a layout is asked for.
    """
    region = widget.content_region
    same_height = region.width > 0 and (
        # Textual passes a widget's styles here itself; its annotation names only RulesMap.
        content.get_height(widget.styles, region.width) == region.height  # type: ignore[arg-type]
    )
    # getattr: a private attribute; a Textual release without it falls back to its own path.
    if not same_height and getattr(widget, "_layout_required", False):
        # A layout asked for earlier is still flagged (the widget's idle check clears the flag),
        # but the screen may have laid out since, for another widget, and cached this widget's
        # box model. `refresh(layout=True)` with the flag up changes nothing in that cache's
        # key (Textual's `_layout_updates`): the next layout would keep the old height, and
        # a reply whose final text is taller than its last streamed paint is cut to that
        # height, the anchored log scrolled past its top. Lowered here, the refresh that
        # `update` asks for raises it again and makes that height be measured anew.
        widget._layout_required = False
    widget.update(content, layout=not same_height)
