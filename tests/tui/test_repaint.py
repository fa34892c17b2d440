"""update_static: a Static whose new content is taller gets its new height, also when a layout
it asked for before has already run (for another widget) before its own idle check."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from kotonia_tui.tui.widgets.repaint import update_static


class _Log(App[None]):
    def compose(self) -> ComposeResult:
        with VerticalScroll(id="log"):
            yield Static("first", id="first")


async def test_a_taller_text_gets_its_height_after_a_layout_that_ran_for_another_widget():
    app = _Log()
    async with app.run_test(size=(40, 12)) as pilot:
        log = app.query_one("#log", VerticalScroll)
        reply = Static()
        await log.mount(reply)
        update_static(reply, Content("one line"))  # no size yet: asks for a layout (flag up)
        # The screen lays out (a mount, another widget's layout) before the reply's own idle
        # check has lowered its flag: its box model is cached at one line.
        app.screen._refresh_layout(app.screen.size)
        assert reply._layout_required and reply.size.height == 1
        update_static(reply, Content("one line\ntwo\nthree"))  # the final text: taller
        await pilot.pause()
        await pilot.pause()
        assert reply.size.height == 3
