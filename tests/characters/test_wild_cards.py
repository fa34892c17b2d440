"""Cards of the shapes found in the wild load, show in the picker and chat (tiny real model)."""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets import ListView

from kotonia_tui.characters import select_entries
from kotonia_tui.chat.library import CharacterLibrary
from kotonia_tui.cli import main
from kotonia_tui.config import app_dirs
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.screens.chat import ChatScreen
from kotonia_tui.tui.screens.conversations import ConversationsScreen
from kotonia_tui.tui.screens.picker import CardItem, PickerScreen
from kotonia_tui.tui.widgets.chat_input import ChatInput
from tests.characters.wild_cards import GENERATORS, sillytavern_v3_export, write_wild_cards
from tests.hostile.text import expected, raw_controls
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import wait_for
from tests.tui.screen_text import screen_text

REPLY = "Hello back, traveller."


def test_each_shape_loads_with_its_greetings_and_lorebook(tmp_path):
    wild = write_wild_cards(tmp_path)
    library = CharacterLibrary([tmp_path])
    assert library.problems == []
    for card in wild:
        loaded = library.get(card.key)
        assert loaded.name == card.name
        greetings = (1 if loaded.first_mes else 0) + len(loaded.alternate_greetings)
        assert greetings == card.greetings
        entries = loaded.character_book.entries if loaded.character_book else []
        assert len(entries) == card.lore_entries
    assert len(library.get("ines").assets) == 3
    assert library.get("ines").display_name == "Ines the Cartographer"


def test_a_sillytavern_book_flagged_use_regex_matches_its_keys_as_text(tmp_path):
    """SillyTavern writes `use_regex: true` on every entry of a book it exports, and reads the
    keys as text: the card loads, and its entries fire on what SillyTavern fires them on (its
    case-sensitive entry too, which it marks in the entry's extensions)."""
    card = sillytavern_v3_export(tmp_path)
    library = CharacterLibrary([tmp_path])
    assert library.problems == []
    book = library.get(card.key).character_book
    assert book is not None

    def fired(text: str) -> list[str | None]:
        return [f.entry.comment for f in select_entries(book, [text], len, 10_000).fired]

    assert fired("她笑着 *pours tea* 递过来。") == ["tea"]
    assert fired("Is that Mr. Lu? It is.") == ["lu"]
    assert fired("Mr. Lux came in.") == []  # as a pattern, `Mr. Lu?` would find "Mr. L"
    assert fired("A new category of leaves.") == []  # whole words, as for any plain key
    assert fired("The cat sleeps.") == ["cat"]
    assert fired("陆先生来了，要一壶茶。") == ["tea", "lu"]
    assert fired("Qing wrote it down.") == ["qing"]
    assert fired("qing, in lower case.") == []  # the entry is case-sensitive in SillyTavern
    # The card's own flag is kept, for export.
    assert all(entry.to_json_dict()["use_regex"] is True for entry in book.entries)


@pytest.mark.parametrize("shape", sorted(GENERATORS))
def test_chat_with_each_shape(shape, scripted_model, monkeypatch, capsys):
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    card = GENERATORS[shape](folder)
    monkeypatch.setenv("KOTONIA_MODEL_PATH", str(scripted_model(REPLY)))
    monkeypatch.setenv("KOTONIA_N_CTX", "8192")
    code = main(["chat", card.key, "--say", "Hello.", "--say", "And again.", "--no-wait"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out == f"{REPLY}\n{REPLY}\n"
    assert f"with {card.name}" in err
    code = main(["conversations", card.key])
    out, _err = capsys.readouterr()
    assert code == 0 and "\t5 messages\t" in out  # greeting + two exchanges


async def test_the_picker_and_a_chat_show_every_shape(scripted_model):
    wild = write_wild_cards(app_dirs().user_characters)
    app = KotoniaApp(tiny_settings(scripted_model(REPLY), n_ctx=8192))
    async with app.run_test(size=(120, 40)) as pilot:
        assert await asyncio.wait_for(app.wait_service(), 30) is not None
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen))
        listing = app.screen.query_one("#card-list", ListView)
        keys = [item.card.key for item in listing.query(CardItem)]
        for card in wild:
            listing.index = keys.index(card.key)
            await pilot.pause()
            text = screen_text(app)
            assert expected(card.name)[:20] in text and not raw_controls(text)
        # The SillyTavern-style card (bracketed PList description, CR LF) from start to chat.
        listing.index = keys.index("default_Maren")
        await pilot.pause()
        assert '[Maren\'s Personality= "patient"' in screen_text(app)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConversationsScreen))
        await pilot.press("n", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        chat: ChatScreen = app.screen  # type: ignore[assignment]
        await pilot.pause()
        assert "Easy. You swallowed half the bay." in screen_text(app)
        ended = chat.turns_ended
        chat.query_one("#input", ChatInput).insert("Thank you.")
        await pilot.press("enter")
        await wait_for(pilot, lambda: chat.turns_ended > ended and not chat.streaming)
        await pilot.pause()
        assert REPLY in screen_text(app)
