"""Pilot tests of group chats, impersonate and quick replies (issue 31), on a tiny real GGUF:
the replies come one after another under their speakers' names, Alt+P picks who speaks,
Alt+A lets the cast go on, Alt+I writes the player's line into the box, Alt+1-9 are quick
replies."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from textual.widgets import Label, ListView

from kotonia_tui.chat.bootstrap import open_service
from kotonia_tui.config import app_dirs
from kotonia_tui.domain import QuickReply, ReplyOrder, Role
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.screens.chat import ChatScreen
from kotonia_tui.tui.screens.chat_base import AUTO_REPLIES
from kotonia_tui.tui.screens.choose import ChoiceItem, ChooseScreen
from kotonia_tui.tui.screens.conversations import ConversationItem, ConversationsScreen
from kotonia_tui.tui.screens.picker import CardItem, PickerScreen
from kotonia_tui.tui.widgets.chat_input import ChatInput
from tests.characters.builders import v2_card
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import views, wait_for

SIZE = (120, 40)


@pytest.fixture
def wren_card(kotonia_home: Path) -> Path:
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "wren.json"
    card = v2_card("Wren", description="Wren mends nets.", first_mes="Wren nods.")
    path.write_text(json.dumps(card), encoding="utf-8")
    return path


async def _open_group(app: KotoniaApp, pilot) -> ChatScreen:
    service = await app.wait_service()
    assert service is not None
    conv = service.groups.new_group([service.library.get("mira"), service.library.get("wren")])
    service.store.set_reply_order(conv.id, ReplyOrder.LIST)
    app.open_conversation(conv.id)
    await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
    await pilot.pause()
    assert isinstance(app.screen, ChatScreen)
    return app.screen


async def _ask(pilot, screen: ChatScreen, *keys: str) -> None:
    """Press `keys` and wait until what they asked for ran to its end (all its replies)."""
    ended = screen.runs_ended
    await pilot.press(*keys)
    await wait_for(pilot, lambda: screen.runs_ended > ended and not screen.streaming, timeout=120)
    await pilot.pause()


def _speakers(screen: ChatScreen) -> list[str]:
    return [v.speaker for v in views(screen)]


async def test_a_group_answers_in_turn_and_the_player_picks_who_speaks(
    tiny_model_path, mira_card, wren_card
):
    app = KotoniaApp(tiny_settings(tiny_model_path, reply_max_tokens=16))
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open_group(app, pilot)
        assert _speakers(screen) == ["Mira", "Wren"]  # each member's greeting
        assert screen.title == "Mira, Wren"  # the whole cast
        screen.query_one(ChatInput).insert("Hello, both of you.")
        await _ask(pilot, screen, "enter")
        # List order: Mira, then Wren, each reply shown under its speaker's name.
        assert _speakers(screen)[2:] == ["User", "Mira", "Wren"]
        assert [v.message.character_key for v in views(screen)[3:]] == ["mira", "wren"]

        await pilot.press("alt+p")
        await wait_for(pilot, lambda: isinstance(app.screen, ChooseScreen))
        listing = app.screen.query_one("#choices", ListView)
        keys = [item.value for item in listing.query(ChoiceItem)]
        assert keys == ["mira", "wren"]
        listing.index = keys.index("wren")
        await _ask(pilot, screen, "enter")
        assert _speakers(screen)[-1] == "Wren"

        await _ask(pilot, screen, "alt+a")  # the cast goes on by itself
        assert len(views(screen)) == 6 + AUTO_REPLIES
        assert {v.role for v in views(screen)[6:]} == {Role.CHARACTER}


async def test_impersonate_fills_the_box_and_quick_replies_send_or_insert(
    tiny_model_path, mira_card, wren_card
):
    app = KotoniaApp(tiny_settings(tiny_model_path, reply_max_tokens=16))
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open_group(app, pilot)
        service = app.service
        assert service is not None
        stored = service.store.message_count(screen.conv_id)
        await pilot.press("alt+i")
        await wait_for(pilot, lambda: screen.impersonated == 1, timeout=120)
        box = screen.query_one(ChatInput)
        assert box.text  # the model's line for the player, to edit
        assert service.store.message_count(screen.conv_id) == stored  # never sent
        box.clear()

        service.store.add_quick_reply(QuickReply(label="Wave", text="*waves*", send=False))
        service.store.add_quick_reply(
            QuickReply(character_key="wren", label="Nets", text="How are the nets?")
        )
        await pilot.press("alt+1")
        await pilot.pause()
        assert box.text == "*waves*"  # inserted, not sent
        assert service.store.message_count(screen.conv_id) == stored
        box.clear()
        # The list and a number: the way that works where a terminal turns Alt+1 into "¡".
        await pilot.press("alt+q")
        await wait_for(pilot, lambda: isinstance(app.screen, ChooseScreen))
        await pilot.press("1")
        await pilot.pause()
        assert app.screen is screen
        assert box.text == "*waves*"
        assert service.store.message_count(screen.conv_id) == stored
        box.clear()
        await _ask(pilot, screen, "alt+2")  # Wren's own quick reply, sent
        user = next(v for v in views(screen) if v.role is Role.USER)
        assert user.text == "How are the nets?"
        assert _speakers(screen)[-2:] == ["Mira", "Wren"]


async def test_members_are_muted_from_the_chat(tiny_model_path, mira_card, wren_card):
    app = KotoniaApp(tiny_settings(tiny_model_path, reply_max_tokens=16))
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open_group(app, pilot)
        await pilot.press("alt+u")
        await wait_for(pilot, lambda: isinstance(app.screen, ChooseScreen))
        listing = app.screen.query_one("#choices", ListView)
        listing.index = 0  # Mira
        await pilot.press("enter")
        await pilot.pause()
        service = app.service
        assert service is not None
        assert [(m.character_key, m.muted) for m in service.groups.cast(screen.conv_id)] == [
            ("mira", True),
            ("wren", False),
        ]
        screen.query_one(ChatInput).insert("Anyone?")
        await _ask(pilot, screen, "enter")
        assert _speakers(screen)[-2:] == ["User", "Wren"]  # Mira is muted


async def test_a_group_starts_from_the_picker_with_the_cards_marked(
    tiny_model_path, mira_card, wren_card
):
    app = KotoniaApp(tiny_settings(tiny_model_path, reply_max_tokens=16))
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_service()
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen))
        listing = app.screen.query_one("#card-list", ListView)
        keys = [item.card.key for item in listing.query(CardItem)]
        for key in ("wren", "mira"):  # the order marked is the cast's order
            listing.index = keys.index(key)
            await pilot.press("space")
        await pilot.press("ctrl+g")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ChatScreen)
        assert _speakers(screen) == ["Wren", "Mira"]  # each member's greeting
        assert app.service is not None
        cast = app.service.groups.cast(screen.conv_id)
        assert [m.character_key for m in cast] == ["wren", "mira"]


async def test_a_group_asked_for_while_the_model_loads_starts_once_it_is_ready(
    tiny_model_path, mira_card, wren_card, monkeypatch
):
    """The model's load is held on an event so that Ctrl+G comes before it ends; the load
    itself is the real one."""
    loading = threading.Event()

    def held_open(*args, **kwargs):
        loading.wait(30)
        return open_service(*args, **kwargs)

    monkeypatch.setattr("kotonia_tui.tui.app.open_service", held_open)
    app = KotoniaApp(tiny_settings(tiny_model_path, reply_max_tokens=16))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen))
        listing = app.screen.query_one("#card-list", ListView)
        keys = [item.card.key for item in listing.query(CardItem)]
        for key in ("mira", "wren"):
            listing.index = keys.index(key)
            await pilot.press("space")
        await pilot.press("ctrl+g")
        await pilot.pause()
        assert app.service is None  # still loading
        messages = " ".join(str(n.message) for n in app._notifications)
        assert "the group starts when it is ready" in messages
        loading.set()
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen), timeout=60)
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ChatScreen)
        assert _speakers(screen) == ["Mira", "Wren"]


async def test_a_member_joins_and_leaves_mid_story(tiny_model_path, mira_card, wren_card):
    app = KotoniaApp(tiny_settings(tiny_model_path, reply_max_tokens=16))
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open_group(app, pilot)
        service = app.service
        assert service is not None
        for key, chosen in (("alt+g", "rowan-ashby"), ("alt+x", "wren")):
            await pilot.press(key)
            await wait_for(pilot, lambda: isinstance(app.screen, ChooseScreen))
            listing = app.screen.query_one("#choices", ListView)
            values = [item.value for item in listing.query(ChoiceItem)]
            listing.index = values.index(chosen)
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
            await pilot.pause()
        assert [m.character_key for m in service.groups.cast(screen.conv_id)] == [
            "mira",
            "rowan-ashby",
        ]
        # Wren's greeting stays in the story after Wren left.
        assert "Wren" in _speakers(screen)


async def _choose_order(pilot, app: KotoniaApp, order: ReplyOrder) -> list[str]:
    """Alt+O, then `order`; the values the list offered, the highlighted one first."""
    await pilot.press("alt+o")
    await wait_for(pilot, lambda: isinstance(app.screen, ChooseScreen))
    listing = app.screen.query_one("#choices", ListView)
    values = [item.value for item in listing.query(ChoiceItem)]
    highlighted = values[listing.index or 0]
    listing.index = values.index(order.value)
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
    await pilot.pause()
    return [highlighted, *values]


async def test_the_reply_order_is_chosen_in_the_chat_and_stored(
    tiny_model_path, mira_card, wren_card
):
    app = KotoniaApp(tiny_settings(tiny_model_path, reply_max_tokens=16))
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open_group(app, pilot)
        service = app.service
        assert service is not None
        offered = await _choose_order(pilot, app, ReplyOrder.MANUAL)
        assert offered == ["list", "natural", "list", "manual"]  # the one in force highlighted
        assert service.store.reply_order(screen.conv_id) is ReplyOrder.MANUAL
        assert "manual order" in (screen.sub_title or "")
        before = len(views(screen))
        screen.query_one(ChatInput).insert("Who will answer?")
        await _ask(pilot, screen, "enter")
        assert _speakers(screen)[before:] == ["User"]  # manual: nobody until the player picks

        offered = await _choose_order(pilot, app, ReplyOrder.NATURAL)
        assert offered[0] == "manual"
        assert service.store.reply_order(screen.conv_id) is ReplyOrder.NATURAL
        assert "natural order" in (screen.sub_title or "")
        screen.query_one(ChatInput).insert("Wren, what do you think?")
        await _ask(pilot, screen, "enter")
        # Natural order: the member the message names answers first.
        assert _speakers(screen)[before + 1 : before + 3] == ["User", "Wren"]


async def test_a_group_is_listed_under_each_of_its_cards_with_its_cast(
    tiny_model_path, mira_card, wren_card
):
    """Seen in the issue-31 tmux run: a group was filed under its first card only, so a player
    who picked another member found "No conversations yet"."""
    app = KotoniaApp(tiny_settings(tiny_model_path, reply_max_tokens=16))
    async with app.run_test(size=SIZE) as pilot:
        service = await app.wait_service()
        assert service is not None
        group = service.groups.new_group([service.library.get("mira"), service.library.get("wren")])
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen))
        listing = app.screen.query_one("#card-list", ListView)
        keys = [item.card.key for item in listing.query(CardItem)]
        listing.index = keys.index("wren")  # the second member
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConversationsScreen))
        conversations = app.screen.query_one("#conv-list", ListView)
        await wait_for(pilot, lambda: len(conversations.query(ConversationItem)) == 1)
        item = conversations.query_one(ConversationItem)
        assert item.conversation.id == group.id
        assert "group: Mira, Wren" in str(item.query_one(Label).render())
