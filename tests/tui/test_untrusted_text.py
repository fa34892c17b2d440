"""Hostile text stays text on every screen of the app.

The hostile corpus (tests/hostile.py) goes everywhere a player's data can come from: the cards
(every field, every container), broken card files with hostile names, the model's name
(GGUF `general.name`), the model's reply (a scripted tiny model), what the user types, an
imported SillyTavern chat, a chapter and a synopsis. The walk visits the picker, every card's
About pane, the conversation list, the chat with the memory inspector, the edit and delete
dialogs, the chapter and synopsis pages, the help screen and the command palette. On each:

- the app did not crash, and every hostile string is on the screen as written (its control
  characters as pictures: ␛, ⟨U+202E⟩);
- no control, escape or bidi character reaches the screen raw;
- nothing from the corpus ever reached Textual's or Rich's markup parser (a spy on
  `Content.from_markup` and `Text.from_markup` records any string carrying the sentinel).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from rich.text import Text
from textual.content import Content
from textual.widgets import Button, ListView, Static

from kotonia_tui.chat.bootstrap import open_store
from kotonia_tui.chatfiles import read_chat_file
from kotonia_tui.config import app_dirs
from kotonia_tui.domain import Chapter, Synopsis
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.screens.chat import ChatScreen
from kotonia_tui.tui.screens.conversations import ConversationsScreen
from kotonia_tui.tui.screens.dialogs import ConfirmScreen, EditScreen, HelpScreen, TextScreen
from kotonia_tui.tui.screens.picker import CardItem, PickerScreen
from kotonia_tui.tui.widgets.chat_input import ChatInput
from kotonia_tui.tui.widgets.inspector import ChapterItem
from tests.hostile.text import (
    HOSTILE,
    SENTINEL,
    expected,
    raw_controls,
    write_broken_cards,
    write_hostile_cards,
    write_hostile_chat,
)
from tests.tiny_models import write_scripted_llama
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import leave, search_palette, visit, wait_for
from tests.tui.screen_text import screen_text

SIZE = (120, 40)
MODEL_NAME = "[/OOC] \x1b]0;Kq7 model\x07 [@click=app.quit]m[/]"
REPLY = "[@click=app.quit]Kq7 reply[/] \x1b]52;c;eA==\x07 [/OOC] done."
USER_TEXT = "[/] Kq7 typed \x1b[2J [@click=app.bell]x[/]"
CHAT_CARD_KIND = "close-ooc"


@pytest.fixture
def markup_spy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every string carrying the sentinel that Textual or Rich was asked to parse as markup."""
    seen: list[str] = []
    content_from_markup = Content.from_markup.__func__  # type: ignore[attr-defined]
    text_from_markup = Text.from_markup.__func__  # type: ignore[attr-defined]

    def content_spy(cls, markup, /, **variables):
        if isinstance(markup, str) and SENTINEL in markup:
            seen.append(markup)
        return content_from_markup(cls, markup, **variables)

    def text_spy(cls, text, *args, **kwargs):
        if SENTINEL in text:
            seen.append(text)
        return text_from_markup(cls, text, *args, **kwargs)

    monkeypatch.setattr(Content, "from_markup", classmethod(content_spy))
    monkeypatch.setattr(Text, "from_markup", classmethod(text_spy))
    return seen


def check(app: KotoniaApp, *wanted: str) -> str:
    """The screen as text: no raw control character on it, and every `wanted` string shown."""
    text = screen_text(app)
    raw = raw_controls(text)
    assert not raw, f"raw control characters on screen: {raw!r}\n{text}"
    for item in wanted:
        assert item in text, f"{item!r} is not on the screen:\n{text}"
    return text


@pytest.fixture(scope="module")
def hostile_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model named with markup and escapes whose reply is hostile too."""
    path = tmp_path_factory.mktemp("hostile_model") / "hostile.gguf"
    return write_scripted_llama(path, REPLY, name=MODEL_NAME)


@pytest.mark.slow
async def test_every_screen_shows_hostile_text_literally(
    hostile_model: Path, markup_spy: list[str], tmp_path: Path
) -> None:
    folder = app_dirs().user_characters
    cards = write_hostile_cards(folder)
    broken = write_broken_cards(folder)
    app = KotoniaApp(tiny_settings(hostile_model))
    async with app.run_test(size=SIZE) as pilot:
        assert await asyncio.wait_for(app.wait_service(), 30) is not None
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen))
        await pilot.pause()
        # The model's name from its file, in the status line.
        check(app, expected(MODEL_NAME)[:30])
        # Broken cards: listed under the cards with their (hostile) file names.
        assert app.screen.query_one("#card-problems").display
        problems = app.screen.query_one("#card-problems-text", Static)
        for path in broken:
            assert expected(path.name) in problems.visual.plain  # type: ignore[attr-defined]

        # Every card, highlighted in turn: its name in the list and the About pane, the start
        # of its description.
        listing = app.screen.query_one("#card-list", ListView)
        keys = [item.card.key for item in listing.query(CardItem)]
        assert {card.key for card in cards} <= set(keys)  # and the shipped samples
        for card in cards:
            listing.index = keys.index(card.key)
            await pilot.pause()
            # (prefixes: the panels wrap or cut long lines; the walk checks what starts them)
            check(app, expected(card.name)[:25], expected(card.description)[:25])
        await pilot.press("ctrl+l")  # reload: the same cards again, and no crash
        await pilot.pause()
        check(app)

        # The conversation screen of one card: its greetings.
        chat_card = next(card for card in cards if card.kind == CHAT_CARD_KIND)
        listing = app.screen.query_one("#card-list", ListView)
        listing.index = [item.card.key for item in listing.query(CardItem)].index(chat_card.key)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConversationsScreen))
        await pilot.pause()
        first_line = chat_card.first_mes.splitlines()[0]
        check(app, expected(first_line), expected(HOSTILE[CHAT_CARD_KIND]))

        # A chat: the greeting, what the user types, the model's reply.
        await pilot.press("n", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        chat: ChatScreen = app.screen  # type: ignore[assignment]
        await pilot.pause()
        check(app, expected(first_line), expected(chat_card.name))
        ended = chat.turns_ended
        chat.query_one("#input", ChatInput).insert(USER_TEXT)
        await pilot.press("enter")
        await wait_for(pilot, lambda: chat.turns_ended > ended and not chat.streaming)
        await pilot.pause()
        check(app, expected(USER_TEXT), expected(REPLY))

        # The memory inspector, with a chapter and two synopsis versions written into the store
        # (the tiny model cannot write a real chapter; this is the only way to show one).
        service = app.service
        assert service is not None
        ids = [m.id for m in service.messages(chat.conv_id)]
        hostile_summary = f"{HOSTILE['click-quit']} {HOSTILE['osc-52']} chapter"
        chapter = service.store.add_chapter(
            Chapter(
                conversation_id=chat.conv_id,
                first_message_id=ids[0],
                last_message_id=ids[-1],
                text=hostile_summary,
                model=MODEL_NAME,
                tokens=9,
            )
        )
        for version in (1, 2):
            service.store.add_synopsis(
                Synopsis(
                    conversation_id=chat.conv_id,
                    version=version,
                    text=f"{HOSTILE['bidi']} synopsis {version}",
                    through_message_id=ids[0],
                    dropped=(f"{HOSTILE['osc-52']} left out",) if version == 1 else (),
                ),
                [],
            )
        await pilot.press("f2")
        await pilot.pause(0.3)
        check(app, "Next prompt")
        # This card's setup squeezes the story, and the inspector says so above the memory: the
        # synopsis is further down the pane, scrolled to as a reader would.
        chat.query_one("#synopsis", Static).scroll_visible(animate=False)
        await pilot.pause(0.3)
        check(app, expected(f"{HOSTILE['bidi']} synopsis 2")[:30])
        item = chat.query_one(ChapterItem)
        assert item.chapter_view.chapter.id == chapter.id
        chapters = chat.query_one("#chapters", ListView)
        chapters.focus()
        chapters.index = 0
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, TextScreen))
        await pilot.pause()
        check(app, expected(hostile_summary), expected(USER_TEXT), expected(REPLY))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is chat)
        chat.query_one("#synopsis-versions", Button).press()
        await wait_for(pilot, lambda: isinstance(app.screen, TextScreen))
        await pilot.pause()
        check(app, expected(f"{HOSTILE['bidi']} synopsis 1"), "left out of the draft")
        check(app, expected(f"{HOSTILE['osc-52']} left out"))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is chat)

        # Edit and delete dialogs on the hostile reply; help; the command palette.
        for key, kind, wanted, close in (
            ("f4", EditScreen, expected(REPLY)[:40], "escape"),
            ("f8", ConfirmScreen, expected(REPLY)[:40], "n"),
            ("f1", HelpScreen, "remap any id under [keys] in config.toml", "escape"),
        ):
            under = await visit(pilot, app, key, kind)
            check(app, wanted)
            await leave(pilot, app, under, close)
        await search_palette(pilot, "Mem")
        check(app, "Memory")
        await pilot.press("escape")
        await pilot.pause()

        # Back to the conversation list: the chat is listed with its last message.
        await pilot.press("ctrl+b")
        await wait_for(pilot, lambda: isinstance(app.screen, ConversationsScreen))
        await pilot.pause(0.3)
        check(app, expected(f"{chat_card.name}: {REPLY}")[:40])

        # An imported SillyTavern chat with hostile speakers, texts and a system line: filed
        # under the card named in the file, listed with it, shown literally.
        chat_file = write_hostile_chat(tmp_path / "[OOC] Kq7 \x1b]0;t\x07.jsonl", chat_card.name)
        conv, messages = read_chat_file(chat_file, "User")
        with open_store(app.settings) as store:
            imported = store.import_conversation(
                conv.model_copy(update={"character_key": chat_card.key}), messages
            )
        app.pop_screen()
        await pilot.pause()
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConversationsScreen))
        await pilot.pause(0.3)
        check(app, expected(chat_file.stem))
        app.open_conversation(imported.id)
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        await pilot.pause(0.3)
        last_texts = [m.text for m in messages][-3:]
        check(app, *(expected(text)[:30] for text in last_texts))
        app.screen.query_one("#log").scroll_home(animate=False)
        await pilot.pause()
        shown = check(app, "system note", "[Start a new chat] Kq7")
        assert "SillyTavern System" not in shown

    assert markup_spy == [], "text from the corpus reached the markup parser"


async def test_a_model_that_fails_to_load_is_named_literally(
    markup_spy: list[str], tmp_path: Path, mira_card: Path
) -> None:
    """The failure is shown (status line and toast), with the file's name as written."""
    bad = tmp_path / "[@click=app.quit]Kq7 \x1b]52;c;eA==\x07.gguf"
    bad.write_bytes(b"GGUF but not really")
    app = KotoniaApp(tiny_settings(bad))
    async with app.run_test(size=SIZE) as pilot:
        assert await asyncio.wait_for(app.wait_service(), 30) is None
        await pilot.pause()
        assert app.load_error
        # (the status line may wrap the path at its space: each half is checked as written)
        check(app, "could not be loaded", "[@click=app.quit]Kq7", "␛]52;c;eA==␇.gguf")
    assert markup_spy == []
