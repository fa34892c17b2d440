"""The search screen: found from the palette or Ctrl+F, Enter opens the chat at the message."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from textual.containers import VerticalScroll
from textual.widgets import Button, Input, ListView

from kotonia_tui.chat.search import SearchResult
from kotonia_tui.config import app_dirs
from kotonia_tui.domain import Conversation, Message, Role, StoredConversation
from kotonia_tui.search_text import Snippet
from kotonia_tui.store import Store
from kotonia_tui.store.search import SearchHit
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.screens.chat import PAGE, ChatScreen
from kotonia_tui.tui.screens.picker import PickerScreen
from kotonia_tui.tui.screens.search import ResultItem, SearchScreen, result_label
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import search_palette, wait_for
from tests.tui.screen_text import screen_text
from tests.zones import local_zone

SIZE = (120, 40)


def _story(n: int = 3 * PAGE) -> dict[str, int]:
    """Mira's conversation of `n` messages, a few of them worth finding, and another one."""
    texts = [f"Line {i} about the lamp and the sea." for i in range(n)]
    texts[20] = "The keeper hid the brass key under the third stair."
    texts[n - 5] = "灯台の鍵は三段目の階段の下にある。"
    with Store.open(app_dirs().default_db) as store:
        conv = store.create_conversation(
            Conversation(character_key="mira", character_name="Mira", persona_name="User")
        )
        other = store.create_conversation(
            Conversation(character_key="mira", character_name="Mira", persona_name="User")
        )
        ids = store.add_messages(
            conv.id,
            [
                Message(
                    role=Role.USER if i % 2 == 0 else Role.CHARACTER,
                    speaker="User" if i % 2 == 0 else "Mira",
                    text=text,
                )
                for i, text in enumerate(texts)
            ],
        )
        (elsewhere,) = store.add_messages(
            other.id, [Message(role=Role.USER, speaker="User", text="Another brass key.")]
        )
    return {"conv": conv.id, "other": other.id, "key": ids[20], "jp": ids[n - 5], "x": elsewhere}


async def _search(pilot, app: KotoniaApp, query: str) -> SearchScreen:
    if not isinstance(app.screen, SearchScreen):
        await pilot.press("ctrl+f")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen))
    screen = app.screen
    assert isinstance(screen, SearchScreen)
    screen.query_one("#search-input", Input).value = query
    await pilot.press("enter")
    await pilot.pause(0.1)
    return screen


async def test_find_an_old_message_and_open_the_chat_there(tiny_eos_model_path, mira_card) -> None:
    found = _story()
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_reader()
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen))
        await search_palette(pilot, "Search")
        assert "Search" in screen_text(app) and "ctrl+f" in screen_text(app).lower()
        await pilot.press("escape")
        screen = await _search(pilot, app, "brass key")
        items = list(screen.query(ResultItem))
        assert {i.result.hit.message_id for i in items} == {found["key"], found["x"]}
        text = screen_text(app)
        assert "2 messages in every conversation, best first." in text
        assert "The keeper hid the brass key under the third stair." in text
        assert "#21" in text  # its place in the conversation, as the chat numbers it

        listing = screen.query_one("#search-results", ListView)
        listing.index = [i.result.hit.message_id for i in items].index(found["key"])
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        log_view = chat.query_one("#log", VerticalScroll)

        def on_screen() -> bool:
            # The message is selected as soon as its page is mounted; the scroll to it comes
            # after the next refresh (ChatScreen.jump_to), later on a busy machine.
            view = chat.selected
            return view is not None and log_view.content_region.contains_region(view.region)

        await wait_for(pilot, on_screen, what="the found message to be scrolled into view")
        assert chat.selected is not None and chat.selected.message_id == found["key"]
        assert chat.selected.region.y > 0  # scrolled into view
        assert "brass key under the third stair" in screen_text(app)
        assert chat.query_one("#later", Button).display  # newer messages are not shown
        assert chat.query_one("#earlier", Button).display is False  # #21 is near the start

        await pilot.click("#later")
        await wait_for(pilot, lambda: chat._at_end)
        assert chat.query_one("#later", Button).display is False
        assert chat._views()[-1].number == 3 * PAGE


async def test_search_in_the_open_chat_japanese_and_jump_in_place(
    tiny_eos_model_path, mira_card
) -> None:
    found = _story()
    app = KotoniaApp(tiny_settings(tiny_eos_model_path), open_conversation_id=found["other"])
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        await pilot.pause()
        screen = await _search(pilot, app, "鍵")  # one character: any part of a word
        assert [i.result.hit.message_id for i in screen.query(ResultItem)] == [found["jp"]]
        await pilot.press("ctrl+o")  # only the open conversation (the other one)
        await pilot.pause(0.1)
        print(screen_text(app))
        assert list(screen.query(ResultItem)) == []
        assert "No message in" in screen_text(app)
        await pilot.press("ctrl+o")
        await pilot.pause(0.1)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        chat = app.screen
        assert isinstance(chat, ChatScreen) and chat.conv_id == found["conv"]
        await wait_for(pilot, lambda: chat.selected is not None)
        assert chat.selected is not None and chat.selected.message_id == found["jp"]

        # From this chat, a message of its own conversation: the same screen jumps.
        await _search(pilot, app, "third stair")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is chat)
        await wait_for(
            pilot, lambda: chat.selected is not None and chat.selected.message_id == found["key"]
        )
        assert [type(s).__name__ for s in app.screen_stack][-2:] == ["ChatScreen", "ChatScreen"]


async def test_a_deleted_message_is_not_found(tiny_eos_model_path, mira_card, tmp_path: Path):
    found = _story(30)
    with Store.open(app_dirs().default_db) as store:
        store.delete_message(found["key"])
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_reader()
        screen = await _search(pilot, app, "brass")
        assert [i.result.hit.message_id for i in screen.query(ResultItem)] == [found["x"]]
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, SearchScreen))

        # A conversation deleted in the app is kept until it closes (undo): never found.
        manager = await app.wait_manager()
        assert manager is not None
        manager.delete(found["other"])
        screen = await _search(pilot, app, "brass")
        assert list(screen.query(ResultItem)) == []
        assert "No message in every conversation has every word." in screen_text(app)
        # Found, then refused with an error toast, is not good enough. (Textual keeps the
        # toasts shown in App._notifications; screen_text does not draw their layer.)
        assert [n.message for n in app._notifications] == []
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, SearchScreen))
        manager.undo_delete()
        screen = await _search(pilot, app, "brass")
        assert [i.result.hit.message_id for i in screen.query(ResultItem)] == [found["x"]]


def test_a_result_tells_its_time_in_local_time() -> None:
    """The store keeps UTC; the user reads the time on their own clock, as SillyTavern's
    dates (read as local time on import) said it: 16:21 UTC is 1:21 the next day in UTC+9."""
    conv = StoredConversation(
        id=1, character_key="mira", character_name="Mira", persona_name="User"
    )
    when = datetime(2026, 12, 4, 16, 21, tzinfo=UTC)
    hit = SearchHit(
        message_id=5,
        conversation_id=1,
        role=Role.USER,
        speaker="User",
        text="The brass key.",
        created_at=when,
        score=0.0,
    )
    result = SearchResult(hit, conv, 3, Snippet("The brass key.", ((4, 9),), False, False))
    with local_zone("Asia/Tokyo"):
        where = result_label(result).plain.split("\n")[0]
    assert where == "Mira · conversation 1 · #3 · User · 2026-12-05 01:21"


FOOTER_LABELS = {
    "esc Close search",
    "^o All / this conversation",
    "^n Best / newest first",
    "^q Quit",
    "f1 Help",
}


def _footer_keys(app: KotoniaApp) -> list[str]:
    """The footer's keys as shown (the last line, left of the palette's key)."""
    footer = screen_text(app).splitlines()[-1]
    keys, sep, palette = footer.partition("▏")
    assert sep and palette.strip() == "^p palette", footer
    return [key.strip() for key in keys.split("  ") if key.strip()]


async def test_at_80x24_the_footer_shows_the_searchs_own_keys_whole(
    tiny_eos_model_path, mira_card
) -> None:
    """The footer keeps to keys that mean something here, each whole: not the app's Ctrl+F
    (which opened this screen; here it goes back to the query), and no label cut at the
    palette's key, from the card list or from a chat (which adds Ctrl+O)."""
    found = _story(30)
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=(80, 24)) as pilot:
        await app.wait_reader()
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen))
        screen = await _search(pilot, app, "brass key")
        await pilot.pause()
        keys = _footer_keys(app)
        assert keys == ["esc Close search", "^n Best / newest first", "^q Quit", "f1 Help"]
        assert "^f Search" not in screen_text(app)

        assert screen.query_one("#search-results", ListView).has_focus
        await pilot.press("ctrl+f")  # back to the query, on the same screen
        await pilot.pause()
        assert app.screen is screen and screen.query_one("#search-input", Input).has_focus
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen))

        app.open_conversation(found["conv"])
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        await pilot.pause()
        await _search(pilot, app, "brass key")
        await pilot.pause()
        keys = _footer_keys(app)
        assert set(keys) <= FOOTER_LABELS, keys
        assert keys[:2] == ["esc Close search", "^o All / this conversation"]
        assert "^f Search" not in screen_text(app)
