"""The settings screen (F9), the inspector's settings and lorebook sections, and where a card's
Character's Note is shown."""

from __future__ import annotations

import json

from textual.widgets import Input, Label, ListView, SelectionList, Static, TextArea

from kotonia_tui.config import app_dirs
from kotonia_tui.domain import ChatSettings
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.screens.chat import ChatScreen
from kotonia_tui.tui.screens.chat_settings import ChatSettingsScreen
from kotonia_tui.tui.screens.picker import CardItem, PickerScreen
from kotonia_tui.tui.widgets.inspector import InspectorPane
from kotonia_tui.tui.widgets.inspector_sections import lore_content, settings_content
from tests.characters.builders import v2_card
from tests.fake_engine import scripted
from tests.settings import fake_settings
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import open_new_chat, send, wait_for
from tests.tui.screen_text import screen_text

WORLD = {
    "entries": {
        "0": {
            "uid": 0,
            "key": ["lighthouse"],
            "keysecondary": [],
            "comment": "Dark tower",
            "content": "Dark ten years.",
            "order": 100,
        },
        "1": {
            "uid": 1,
            "key": ["key"],
            "keysecondary": ["stair"],
            "selective": True,
            "comment": "Hidden key",
            "content": "A brass key, green with age, lies under the third stair of the tower. "
            "Only the keeper's family knows it is there.",
            "order": 90,
        },
    }
}


def _top(app: KotoniaApp) -> object:
    return app.screen


def _world() -> None:
    folder = app_dirs().world_info
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "harbor.json").write_text(json.dumps(WORLD), encoding="utf-8")


async def _open_settings(pilot, chat: ChatScreen) -> ChatSettingsScreen:
    await pilot.press("f9")
    await wait_for(pilot, lambda: isinstance(chat.app.screen, ChatSettingsScreen))
    screen = chat.app.screen
    assert isinstance(screen, ChatSettingsScreen)
    return screen


async def test_settings_are_checked_saved_and_shown_with_the_lore_that_fired(
    tiny_model_path, mira_card
) -> None:
    _world()
    app = KotoniaApp(tiny_settings(tiny_model_path, reply_max_tokens=24))
    async with app.run_test(size=(120, 40)) as pilot:
        chat = await open_new_chat(app, pilot)
        service = app.service
        assert service is not None
        screen = await _open_settings(pilot, chat)
        world = screen.query_one("#conversation-world", SelectionList)
        assert [world.get_option_at_index(i).value for i in range(world.option_count)] == [
            "harbor.json"
        ]
        screen.query_one("#conversation-temperature", Input).value = "1.5"
        screen.query_one("#conversation-top_p", Input).value = "1.5"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.screen is screen  # not saved, still open
        assert "top-p (conversation): must be at most 1, got 1.5" in screen_text(app)
        assert service.store.conversation_settings(chat.conv_id) == ChatSettings()

        screen.query_one("#conversation-top_p", Input).value = "0.9"
        screen.query_one("#conversation-lore_budget", Input).value = "9999"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.screen is screen
        assert "lore budget 9999 (the conversation's) is more than a quarter" in screen_text(app)
        screen.query_one("#conversation-lore_budget", Input).value = ""
        # A lore budget of 40 tokens: the short entry fits, the long one is left out.
        screen.query_one("#character-lore_budget", Input).value = "40"
        screen.query_one("#character-reply_max_tokens", Input).value = "20"
        screen.query_one("#conversation-note", TextArea).text = "[{{char}} whispers.]"
        screen.query_one("#conversation-depth", Input).value = "1"
        screen.query_one("#conversation-world", SelectionList).select("harbor.json")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: _top(app) is chat)
        stored = service.store.conversation_settings(chat.conv_id)
        assert (stored.generation.temperature, stored.generation.top_p) == (1.5, 0.9)
        assert (stored.author_note, stored.author_note_depth) == ("[{{char}} whispers.]", 1)
        assert stored.world_info == ("harbor.json",)
        assert service.store.character_settings("mira").generation.reply_max_tokens == 20

        await send(pilot, chat, "Is the key under the stair of the lighthouse?")
        await pilot.press("f2")
        await pilot.pause(0.3)
        view = chat.query_one(InspectorPane).view
        assert view is not None
        shown = settings_content(view).plain
        assert "temperature 1.5 (conversation)" in shown
        assert "reply length 20 (character)" in shown
        assert "lore budget 40 (character)" in shown
        assert "Author's Note" in shown and "1 message from the end (conversation)" in shown
        # In the order they were ranked for the budget (insertion order 90 before 100).
        _total, left_out, sent = lore_content(view).plain.splitlines()
        assert left_out.startswith("✗ Hidden key (harbor.json) on 'key' + 'stair'")
        assert left_out.endswith("left out: over the budget")
        assert sent.startswith("✓ Dark tower (harbor.json) on 'lighthouse'")
        inspector = chat.query_one(InspectorPane)
        inspector.scroll_to_widget(inspector.query_one("#lore"), animate=False, top=True)
        await pilot.pause()
        assert "✓ Dark tower" in screen_text(app)  # drawn in the pane, below the memory
        metrics = service.store.last_turn_metrics(chat.conv_id)
        assert metrics is not None and metrics.generated <= 20

        # Opened again, the form shows what is stored.
        screen = await _open_settings(pilot, chat)
        assert screen.query_one("#conversation-temperature", Input).value == "1.5"
        assert screen.query_one("#character-reply_max_tokens", Input).value == "20"
        assert screen.query_one("#character-lore_budget", Input).value == "40"
        assert "40 (character)" in str(screen.query_one("#effective-lore_budget", Label).content)
        assert "harbor.json" in screen.query_one("#conversation-world", SelectionList).selected
        await pilot.press("escape")
        await wait_for(pilot, lambda: _top(app) is chat)


async def test_the_settings_screen_fits_a_small_terminal(tiny_eos_model_path, mira_card) -> None:
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=(80, 24)) as pilot:
        chat = await open_new_chat(app, pilot)
        screen = await _open_settings(pilot, chat)
        text = screen_text(app)
        for shown in ("conversation", "character", "in effect", "temperature", "Ctrl+S saves"):
            assert shown in text, shown
        screen.query_one("#conversation-reply_max_tokens", Input).value = "5000"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert "reply length 5000 (the conversation's)" in screen_text(app)


def _card_with_a_character_note() -> None:
    """Mira with SillyTavern's Character's Note (`extensions.depth_prompt`) at depth 2."""
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    note = {"prompt": "[{{char}} never names the wreck to {{user}}.]", "depth": 2, "role": "system"}
    card = v2_card("Mira", first_mes="Mira nods.", extensions={"depth_prompt": note})
    (folder / "mira.json").write_text(json.dumps(card), encoding="utf-8")


async def test_the_inspector_shows_the_cards_note_where_it_goes(make_fake_service) -> None:
    """Fake engine: this test is about what the inspector says, which does not depend on the
    model."""
    _card_with_a_character_note()
    service = await make_fake_service(fake_settings(), scripted("Hm."))
    conv = service.new_conversation(service.library.get("mira"))
    shown = settings_content(service.memory_view(conv.id)).plain.splitlines()
    at = next(i for i, line in enumerate(shown) if line.startswith("Character's Note "))
    assert shown[at].endswith(", 2 messages from the end, as a system line (Mira's card)")
    assert shown[at + 1] == "[Mira never names the wreck to User.]"


async def test_the_card_list_says_the_card_has_a_note_and_where(tiny_eos_model_path) -> None:
    _card_with_a_character_note()
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen))
        listing = app.screen.query_one("#card-list", ListView)
        listing.index = [item.card.key for item in listing.query(CardItem)].index("mira")
        await pilot.pause(0.2)
        heading = str(app.screen.query_one("#card-heading", Static).content)
        assert "1 greeting · Character's Note at depth 2 (system)" in heading
        assert "Character's Note at depth 2" in screen_text(app)
