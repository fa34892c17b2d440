"""What a newcomer meets in the first minutes, as Pilot tests on tiny real models (issue 12)."""

from __future__ import annotations

import asyncio

import pytest
from textual import events
from textual.command import CommandList
from textual.content import Content
from textual.widgets import ListView, Static

from kotonia_tui.chat.bootstrap import open_store
from kotonia_tui.domain import Chapter, Conversation, Message, Role, Synopsis
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.screens.chat import ChatScreen
from kotonia_tui.tui.screens.conversations import ConversationsScreen
from kotonia_tui.tui.screens.dialogs import HelpScreen
from kotonia_tui.tui.screens.picker import CardItem, PickerScreen
from kotonia_tui.tui.widgets.chat_input import ChatInput
from kotonia_tui.tui.widgets.inspector import InspectorPane
from tests.characters.builders import picture, tavernai_comment, v2_card, webp_with_comment
from tests.settings import fake_settings
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import open_new_chat, send, views, wait_for
from tests.tui.screen_text import screen_text

SIZE = (120, 40)
REPLY = '*Mira nods.* "Clock," she says.\nShe points at the stairs.'


def import_chat(settings, lines: list[tuple[Role, str, str]]) -> int:
    with open_store(settings) as store:
        conv = store.import_conversation(
            Conversation(character_key="mira", character_name="Mira", persona_name="User"),
            [Message(role=role, speaker=speaker, text=text) for role, speaker, text in lines],
        )
    assert conv.id is not None
    return conv.id


async def open_chat(app: KotoniaApp, pilot) -> ChatScreen:
    await asyncio.wait_for(app.wait_service(), 30)
    await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
    await pilot.pause()
    return app.screen  # type: ignore[return-value]


@pytest.mark.parametrize("key", ["enter", "ctrl+r"])
async def test_the_character_answers_the_users_last_message(key, scripted_model, mira_card):
    """A chat ending with the user (imported so, or a reply stopped before its first word):
    Enter on an empty box, or Ctrl+R, makes the character answer."""
    settings = tiny_settings(scripted_model(REPLY))
    conv_id = import_chat(
        settings,
        [(Role.CHARACTER, "Mira", "The door creaks."), (Role.USER, "User", "Is this the shop?")],
    )
    app = KotoniaApp(settings, open_conversation_id=conv_id)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_chat(app, pilot)
        ended = screen.turns_ended
        await pilot.press(key)
        await wait_for(pilot, lambda: screen.turns_ended > ended and not screen.streaming)
        await pilot.pause()
        reply = views(screen)[-1]
        assert reply.role is Role.CHARACTER and reply.text == REPLY
        assert reply.number == 3
        assert "Mira  #3" in screen_text(app)


async def test_messages_are_shown_as_written(scripted_model, mira_card):
    """Line breaks kept, quotes in place (no separate "spoken line"), the speaker once."""
    app = KotoniaApp(tiny_settings(scripted_model(REPLY)))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        chat_input = screen.query_one("#input", ChatInput)
        chat_input.insert("First line.")
        await pilot.press("ctrl+j")
        chat_input.insert('He said "clock" twice. 「忘れもの帳」 too.')
        ended = screen.turns_ended
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen.turns_ended > ended and not screen.streaming)
        await pilot.pause()
        lines = [line.strip("│▎ ") for line in screen_text(app).splitlines()]
        assert "First line." in lines
        assert 'He said "clock" twice. 「忘れもの帳」 too.' in lines
        assert 'Mira nods. "Clock," she says.' in lines  # the action's asterisks are markup
        assert "She points at the stairs." in lines
        assert not any(line.startswith(("Mira: ", "User: ")) for line in lines)
        user, reply = views(screen)[-2:]
        assert user.text == 'First line.\nHe said "clock" twice. 「忘れもの帳」 too.'
        assert reply.text == REPLY  # stored exactly as written


async def test_numbers_count_within_each_conversation(tiny_eos_model_path, mira_card):
    settings = tiny_settings(tiny_eos_model_path)
    import_chat(settings, [(Role.USER, "User", f"message {n}") for n in range(7)])
    app = KotoniaApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)  # a new conversation: its greeting is #1
        assert [v.number for v in views(screen)] == [1]
        assert "Mira  #1" in screen_text(app)


async def test_alt_c_copies_while_the_message_box_has_the_focus(tiny_eos_model_path, mira_card):
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        chat_input = screen.query_one("#input", ChatInput)
        assert chat_input.has_focus
        # As a terminal reports Alt+C (ESC c): the key "alt+c" carrying the character "c".
        app.post_message(events.Key("alt+c", "c"))
        await pilot.pause()
        assert app.clipboard == views(screen)[-1].text
        assert chat_input.text == ""  # no "c" typed


async def test_the_conversation_list_is_fresh_after_a_chat(scripted_model, mira_card):
    app = KotoniaApp(tiny_settings(scripted_model(REPLY)))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        await send(pilot, screen, "Hello.")
        await pilot.press("ctrl+b")
        await wait_for(pilot, lambda: isinstance(app.screen, ConversationsScreen))
        await pilot.pause(0.3)
        text = screen_text(app)
        assert "3 messages" in text and "Mira: *Mira nods.*" in text


async def test_a_failed_model_load_leaves_the_conversations_readable(mira_card, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a model")
    settings = tiny_settings(bad)
    import_chat(settings, [(Role.CHARACTER, "Mira", "Welcome back to the lighthouse.")])
    app = KotoniaApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        assert await asyncio.wait_for(app.wait_service(), 30) is None
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen))
        listing = app.screen.query_one("#card-list", ListView)
        listing.index = [item.card.key for item in listing.query(CardItem)].index("mira")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConversationsScreen))
        await pilot.pause(0.3)
        assert "Welcome back to the lighthouse." in screen_text(app)
        await pilot.press("enter")  # the conversation list has the focus
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        await pilot.pause()
        screen: ChatScreen = app.screen  # type: ignore[assignment]
        assert "Welcome back to the lighthouse." in screen_text(app)
        assert "Read only" in screen_text(app)
        screen.query_one("#input", ChatInput).insert("Hello?")
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert screen.query_one("#input", ChatInput).text == "Hello?"  # kept, not lost
        assert any("could not be loaded" in str(n.message) for n in app._notifications)
        assert "still loading" not in " ".join(str(n.message) for n in app._notifications)


async def test_the_inspector_is_filled_when_a_chat_opens_with_it(tiny_eos_model_path, mira_card):
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=SIZE) as pilot:
        await open_new_chat(app, pilot)
        await pilot.press("f2")
        await pilot.press("ctrl+b", "escape")  # back to the picker, the inspector left open
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen))
        screen = await open_new_chat(app, pilot)  # a second conversation, no turn yet
        await pilot.pause(0.2)
        assert screen.query_one(InspectorPane).view is not None
        text = screen_text(app)
        assert "setup" in text and "no turn yet in this conversation" in text
        assert "T: past it, a fold is queued" in text  # the legend of the bar's marks


async def test_the_palette_lists_each_command_once(tiny_eos_model_path, mira_card):
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=SIZE) as pilot:
        await open_new_chat(app, pilot)
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: bool(app.screen.query(CommandList)))
        await pilot.pause(0.5)
        options = app.screen.query_one(CommandList)
        prompts = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        titles = [prompt.splitlines()[0] for prompt in prompts]
        assert titles.count("Quit") == 1 and titles.count("Theme") == 1
        assert "Regenerate" in titles


async def test_at_80_by_24_the_chat_keeps_room_and_the_footer_its_way_out(
    tiny_eos_model_path, mira_card
):
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_new_chat(app, pilot)
        await pilot.press("f2")
        await pilot.pause(0.2)
        assert screen.query_one("#chat-column").size.width >= 44
        footer = screen_text(app).splitlines()[-1]
        for label in ("Send", "Memory", "Back", "Quit", "Help"):
            assert label in footer, footer
        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause()
        # The dialog's inside only: what the chat draws beside it (a scroll bar) is not the hint.
        left = app.screen.query_one(".dialog").region.x + 1
        inside = [line[left:] for line in screen_text(app).splitlines()]
        lines = [line[: line.rfind("│")].strip("│ ") for line in inside]
        hint = " ".join(line for line in lines if line)
        assert "Ctrl+P opens the command palette." in hint  # the hint wraps, nothing cut


@pytest.mark.parametrize("width", [100, 120, 140])
async def test_at_every_width_the_footer_keeps_its_first_keys_and_fills_the_rest(
    width, tiny_eos_model_path, mira_card
):
    """At 120 columns the footer showed every key in order and Help fell off its end."""
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=(width, 30)) as pilot:
        await open_new_chat(app, pilot)
        await pilot.pause(0.2)
        footer = screen_text(app).splitlines()[-1]
        for label in ("Send", "Memory", "Regenerate", "Back", "Quit", "Help", "palette"):
            assert label in footer, footer
        # The rest come while they fit, whole: wider shows more of them, none cut short.
        rest = ("Attach", "Continue", "Edit", "Settings", "Branch", "Search")
        shown = [label for label in rest if label in footer]
        assert (width < 140) or len(shown) >= 4, footer
        assert footer.rstrip().endswith("palette"), footer


@pytest.mark.parametrize("width", [80, 100, 110, 118, 119, 120, 130, 140, 160])
async def test_the_footer_fills_in_its_order_and_has_f9_settings_at_120_columns(
    width, on_the_fake_engine, mira_card
):
    """At 120 columns the chat's footer had no F9 Settings: one column short (the palette's
    room was counted two columns wider than it is drawn), and Ctrl+N Branch, which comes after
    it, took its place. The keys after the first ones now come in their order, each only when
    the one before it is shown, and the room is the palette's as drawn. At 80 columns the
    first ones take it all (F9 is in Ctrl+P and F1).

    Fake engine: the footer does not depend on the model."""
    app = KotoniaApp(fake_settings())
    async with app.run_test(size=(width, 30)) as pilot:
        await open_new_chat(app, pilot)
        await pilot.pause(0.2)
        footer = screen_text(app).splitlines()[-1]
        assert footer.endswith("▏^p palette") and len(footer) < width, footer
        rest = ["f3 Attach", "^g Continue", "f4 Edit", "f9 Settings", "^n Branch", "^f Search"]
        shown = [key for key in rest if key in footer]
        assert shown == rest[: len(shown)], footer
        if width >= 120:
            assert "f9 Settings" in footer, footer
        if width == 80:
            assert shown == [], footer  # the first ones take the room


async def test_after_a_major_fold_the_chapters_section_says_where_they_went(
    tiny_eos_model_path, mira_card
):
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        await pilot.press("f2")
        store = app.service.store
        (greeting,) = store.recent_messages(screen.conv_id, 5)
        # A major fold's outcome, written through the store: the tiny model cannot write it.
        chapter = store.add_chapter(
            Chapter(
                conversation_id=screen.conv_id,
                first_message_id=greeting.id,
                last_message_id=greeting.id,
                text="Mira met User.",
            )
        )
        store.add_synopsis(
            Synopsis(
                conversation_id=screen.conv_id,
                version=1,
                text="Mira met User at the lighthouse.",
                through_message_id=greeting.id,
            ),
            [chapter.id],
        )
        screen.refresh_memory()
        await pilot.pause()
        text = screen_text(app)
        assert "none since the synopsis: the older chapters were" in text
        assert "folded into it (below)" in text
        assert "1 message ·" in text
        assert "Mira met User at the lighthouse." in text


async def test_broken_cards_stay_listed_in_full(tiny_eos_model_path, mira_card):
    """Start-up warnings used to be toasts that expired before the picker was even drawn."""
    broken = mira_card.parent / "broken.json"
    broken.write_text(
        '{"spec": "chara_card_v2", "data": {"name": "B", "character_book": '
        '{"entries": [{"keys": "x", "content": "y"}]}}}',
        encoding="utf-8",
    )
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.wait_for(app.wait_service(), 30)
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen))
        await pilot.pause(0.5)
        text = screen_text(app)
        assert "1 card could not be read" in text
        assert "expected a list of strings, got string" in text  # the end of the message
        visual = app.screen.query_one("#card-problems-text", Static).visual
        assert isinstance(visual, Content)
        shown = visual.plain
        message = "broken.json: data.character_book.entries[0].keys: expected a list of strings"
        assert message in shown.replace("\n", " ")


async def test_a_webp_card_is_listed_and_a_webp_with_none_is_named(on_the_fake_engine, mira_card):
    """A TavernAI .webp card (the JSON in its EXIF) used to be passed over without a word: it
    is listed now, and a .webp with no card in it is named with what to do; a .jpg beside them
    is no card file and is not mentioned. Fake engine: the picker does not need the model."""
    folder = mira_card.parent
    (folder / "ren.webp").write_bytes(webp_with_comment(tavernai_comment(v2_card("Ren"))))
    (folder / "moon.webp").write_bytes(webp_with_comment(None))
    (folder / "photo.jpg").write_bytes(picture("JPEG"))
    app = KotoniaApp(fake_settings())
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen))
        await pilot.pause(0.2)
        assert "Ren" in [item.card.name for item in app.screen.query(CardItem)]
        visual = app.screen.query_one("#card-problems-text", Static).visual
        assert isinstance(visual, Content)
        shown = " ".join(visual.plain.split())
        assert "1 card could not be read" in shown
        assert (
            "moon.webp: a WebP picture with no card data (no card JSON in its EXIF UserComment, "
            "where TavernAI kept it): save the card as PNG or JSON, or put its .json beside it"
        ) in shown
        assert "photo.jpg" not in shown


async def test_a_repaired_card_is_listed_and_not_called_unreadable(tiny_eos_model_path, mira_card):
    """A card with invalid UTF-8 loads with U+FFFD in its place and can be chosen; the picker
    used to count it among the cards that "could not be read" (seen with the hostile corpus)."""
    repaired = mira_card.parent / "latin.json"
    repaired.write_bytes(
        b'{"spec": "chara_card_v2", "data": {"name": "Lat\xefn", "first_mes": "Hi."}}'
    )
    broken = mira_card.parent / "broken.json"
    broken.write_text('{"spec": "chara_card_v2", "data": {"name": 3}}', encoding="utf-8")
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.wait_for(app.wait_service(), 30)
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen))
        await pilot.pause(0.5)
        listed = [item.card.name for item in app.screen.query(CardItem)]
        assert "Lat\ufffdn" in listed
        visual = app.screen.query_one("#card-problems-text", Static).visual
        assert isinstance(visual, Content)
        shown = visual.plain.replace("\n", " ")
        assert "1 card could not be read" in shown and "broken.json" in shown
        assert "1 card read with a repair:" in shown
        assert "latin.json: 1 invalid Unicode sequence was replaced with U+FFFD" in shown
        unreadable = shown.split("read with a repair:")[0]
        assert "latin.json" not in unreadable
