"""The inspector shows a chapter's text: select a chapter in the memory pane (F2, Tab to the
list, Enter) and its page gives the text, the range of messages it covers, its in-story time and
where the text came from, then the source messages. Real engine on a tiny GGUF for the turns;
the chapter is stored through the store, as a fold would store it (the chronicler's output is
not the point)."""

from __future__ import annotations

from textual.widgets import ListView

from kotonia_tui.domain import Chapter
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.widgets.inspector import ChapterItem, InspectorPane
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import open_new_chat, send, wait_for
from tests.tui.screen_text import screen_text
from tests.tui.test_chat import SIZE

TEXT = "Ann reached the lighthouse in the storm; Mira let her in and lit the lamp."


async def test_selecting_a_chapter_shows_its_text_range_and_origin(tiny_model_path, mira_card):
    app = KotoniaApp(tiny_settings(tiny_model_path, reply_max_tokens=16))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        for text in ("Hello, Mira.", "Is the lamp lit?"):
            await send(pilot, screen, text)
        service = app.service
        assert service is not None
        service.store.store_chapter(
            Chapter(
                conversation_id=screen.conv_id,
                first_message_id=1,
                last_message_id=3,
                text=TEXT,
                story_time="Wednesday, 31 October 2018",
                model="chronicler-test",
                gen_ms=2500.0,
            ),
            [],
        )
        await pilot.press("f2")
        screen.refresh_memory()
        inspector = screen.query_one(InspectorPane)
        await wait_for(pilot, lambda: bool(list(inspector.query(ChapterItem))))
        listing = inspector.query_one("#chapters", ListView)
        while app.focused is not listing:  # as a user gets there: Tab until the list
            await pilot.press("tab")
        await pilot.press("enter")
        # Named by its range, as the chat numbers messages (not by its store id).
        await wait_for(pilot, lambda: "Chapter #1-#3" in screen_text(app))
        page = screen_text(app)
    assert TEXT in page
    assert "messages #1-#3 (3 messages)" in page
    assert "origin: written by the chronicler (chronicler-test, 2.5 s)" in page
    # When it happened, as the memory block says it (a temporal question rests on it).
    assert "in-story time: Wednesday, 31 October 2018" in page
    assert "Source messages" in page and "Hello, Mira." in page
