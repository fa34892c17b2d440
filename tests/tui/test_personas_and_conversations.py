"""Issue 19 in the app (Pilot, tiny real models): personas, conversations managed in the app
(rename, duplicate, delete and undo, branch, import, export), SillyTavern swipes, and undoing
a deleted message."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from textual.command import CommandPalette
from textual.widgets import Input, Label, ListView, TextArea

from kotonia_tui.chat.bootstrap import open_store
from kotonia_tui.domain import Message, Role, utcnow
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.render import age
from kotonia_tui.tui.screens.ask import AskTextScreen
from kotonia_tui.tui.screens.chat import ChatScreen
from kotonia_tui.tui.screens.conversations import ConversationItem, ConversationsScreen
from kotonia_tui.tui.screens.dialogs import ConfirmScreen, HelpScreen
from kotonia_tui.tui.screens.files import OpenFileScreen, SaveFileScreen
from kotonia_tui.tui.screens.personas import PersonaEditScreen, PersonaItem, PersonasScreen
from kotonia_tui.tui.screens.picker import PickerScreen
from kotonia_tui.tui.widgets.chat_input import ChatInput
from kotonia_tui.tui.widgets.message_view import MessageView
from tests.settings import fake_settings
from tests.tiny_models import write_tiny_png
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import open_new_chat, run_key, send, views, wait_for
from tests.tui.screen_text import screen_text

SIZE = (120, 40)
SMALL = (80, 24)


async def _until_screen(pilot, app: KotoniaApp, kind: type) -> None:
    await wait_for(pilot, lambda: isinstance(app.screen, kind))
    await pilot.pause()


def _last_user(screen: ChatScreen) -> MessageView:
    return [v for v in views(screen) if v.role is Role.USER][-1]


async def _make_persona(pilot, app: KotoniaApp, name: str, description: str, png: Path) -> None:
    await pilot.press("n")
    await _until_screen(pilot, app, PersonaEditScreen)
    app.screen.query_one("#persona-name", Input).value = name
    app.screen.query_one("#persona-description-text", TextArea).text = description
    app.screen.query_one("#persona-picture", Input).value = str(png)
    await pilot.press("ctrl+s")
    await _until_screen(pilot, app, PersonasScreen)
    await wait_for(pilot, lambda: name in screen_text(app))


async def test_personas_are_made_chosen_and_played_as(tiny_eos_model_path, mira_card, tmp_path):
    png = write_tiny_png(tmp_path / "kit.png")
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.wait_for(app.wait_service(), 30)
        await _until_screen(pilot, app, PickerScreen)
        await pilot.press("f5")
        await _until_screen(pilot, app, PersonasScreen)
        await wait_for(pilot, lambda: "★ User" in screen_text(app))  # the settings' persona
        await _make_persona(pilot, app, "Kit", "{{user}} maps the northern coast.", png)
        listing = app.screen.query_one("#persona-list", ListView)
        names = [item.persona.name for item in listing.query(PersonaItem)]
        listing.index = names.index("Kit")
        await pilot.press("s")  # the default from now on
        await wait_for(pilot, lambda: "★ Kit" in screen_text(app))
        assert "default · 0 conversations" in screen_text(app)
        assert app.service is not None and app.service.persona.image is not None

        await pilot.press("escape")
        await _until_screen(pilot, app, PickerScreen)
        screen = await open_new_chat(app, pilot)
        # The greeting's {{user}} is the persona; the chat says who you play.
        assert "You made it through the storm, Kit." in screen_text(app)
        assert "as Kit" in str(screen.sub_title)
        await send(pilot, screen, "Hello.")
        assert _last_user(screen).speaker == "Kit"

        # Another persona for this conversation, said what it means first.
        await pilot.press("f5")
        await _until_screen(pilot, app, PersonasScreen)
        assert "choose who you play in this conversation" in screen_text(app)
        listing = app.screen.query_one("#persona-list", ListView)
        names = [item.persona.name for item in listing.query(PersonaItem)]
        listing.index = names.index("User")
        await pilot.press("enter")
        await _until_screen(pilot, app, ConfirmScreen)
        question = screen_text(app)
        assert "Play this conversation as User from now on?" in question
        assert "reads the whole prompt again" in question
        await pilot.press("y")
        await wait_for(pilot, lambda: app.screen is screen)
        assert "as User" in str(screen.sub_title)
        await send(pilot, screen, "It is me.")
        assert _last_user(screen).speaker == "User"
        stored = app.service.store.get_conversation(screen.conv_id)
        assert stored.persona_name == "User"

        # The help lists the new keys with their ids, the palette finds them.
        await pilot.press("f1")
        await _until_screen(pilot, app, HelpScreen)
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen)
        rows = {(ident, where): keys for keys, _what, ident, where in help_screen.rows}
        assert rows[("persona_new", "personas")] == "N"
        assert rows[("branch", "chat")] == "Ctrl+N"
        assert rows[("undo_delete", "chat")] == "Ctrl+Z"
        assert rows[("delete_conversation", "conversations")] == "Delete / D"
        assert rows[("personas", "characters")] == "F5"
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen)
        await pilot.press("ctrl+p")
        await _until_screen(pilot, app, CommandPalette)
        await pilot.press(*"Branch")
        await wait_for(pilot, lambda: "key: Ctrl+n" in screen_text(app))
        await pilot.press("escape")


def _stored_conversations(app: KotoniaApp) -> dict[int, str]:
    assert app.service is not None
    return {c.id: c.title for c in app.service.store.list_conversations()}


async def _highlight(pilot, app: KotoniaApp, conv_id: int) -> None:
    listing = app.screen.query_one("#conv-list", ListView)
    ids = [item.conversation.id for item in listing.query(ConversationItem)]
    listing.index = ids.index(conv_id)
    listing.focus()
    await pilot.pause()


async def test_conversations_are_renamed_duplicated_deleted_undone_exported_and_imported(
    tiny_eos_model_path, mira_card, tmp_path
):
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=SIZE) as pilot:
        chat = await open_new_chat(app, pilot)
        conv_id = chat.conv_id
        await pilot.press("ctrl+b")
        await _until_screen(pilot, app, ConversationsScreen)
        await wait_for(pilot, lambda: f"  id {conv_id} · " in screen_text(app))

        await pilot.press("r")
        await _until_screen(pilot, app, AskTextScreen)
        app.screen.query_one("#ask-text", Input).value = "Storm night"
        await pilot.press("enter")
        await wait_for(pilot, lambda: "Storm night" in screen_text(app))

        await pilot.press("c")
        await wait_for(pilot, lambda: "Storm night (copy)" in screen_text(app))
        copy_id = next(i for i, t in _stored_conversations(app).items() if t.endswith("(copy)"))

        await _highlight(pilot, app, copy_id)
        await pilot.press("d")
        await _until_screen(pilot, app, ConfirmScreen)
        assert "Ctrl+Z brings it back until you quit the app" in screen_text(app)
        await pilot.press("y")
        await wait_for(pilot, lambda: "(copy)" not in screen_text(app))
        assert copy_id not in _stored_conversations(app)
        await pilot.press("ctrl+z")
        await wait_for(pilot, lambda: "Storm night (copy)" in screen_text(app))

        await _highlight(pilot, app, conv_id)
        exported = tmp_path / "storm.jsonl"
        await pilot.press("x")
        await _until_screen(pilot, app, SaveFileScreen)
        app.screen.query_one("#file-path", Input).value = str(exported)
        await pilot.press("enter")
        await wait_for(pilot, lambda: exported.exists())
        header = json.loads(exported.read_text().splitlines()[0])
        assert header["character_name"] == "Mira"

        await pilot.press("i")
        await _until_screen(pilot, app, OpenFileScreen)
        app.screen.query_one("#file-path", Input).value = str(exported)
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(_stored_conversations(app)) == 3)
        imported = max(_stored_conversations(app))
        assert _stored_conversations(app)[imported] == "storm"  # the file's name
        await wait_for(pilot, lambda: f"  id {imported} · " in screen_text(app))  # under Mira

        # A deletion not undone is gone for good once the app closes.
        await _highlight(pilot, app, copy_id)
        await pilot.press("d")
        await _until_screen(pilot, app, ConfirmScreen)
        await pilot.press("y")
        await wait_for(pilot, lambda: copy_id not in _stored_conversations(app))
    with open_store(app.settings) as store:
        assert sorted(c.id for c in store.list_conversations()) == sorted([conv_id, imported])
        assert store.purge_hidden() == []  # nothing left hidden


async def test_swipes_like_sillytavern(tiny_model_path, mira_card):
    app = KotoniaApp(tiny_settings(tiny_model_path))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        await send(pilot, screen, "Hello.")
        first = views(screen)[-1].text
        # → on the only (so the newest) version of the last reply writes another.
        await run_key(pilot, screen, "right")
        reply = views(screen)[-1].message
        assert reply is not None and (len(reply.alternatives), reply.chosen) == (2, 1)
        assert "‹ 2/2 ›" in screen_text(app)
        second = views(screen)[-1].text
        await pilot.press("left")
        await pilot.pause()
        assert views(screen)[-1].text == first and "‹ 1/2 ›" in screen_text(app)
        await pilot.press("left")  # the first version: nothing older, no wrapping round
        await pilot.pause()
        assert views(screen)[-1].message.chosen == 0
        ended = screen.turns_ended
        await pilot.press("right")  # back to the second: no new version
        await pilot.pause()
        assert views(screen)[-1].text == second and screen.turns_ended == ended
        await run_key(pilot, screen, "right")  # on the newest: a third
        assert len(views(screen)[-1].message.alternatives) == 3
        assert "‹ 3/3 ›" in screen_text(app)
        # With text in the box, the arrows move the cursor as in any text box.
        box = screen.query_one(ChatInput)
        box.insert("ab")
        await pilot.press("left", "left", "x")
        await pilot.pause()
        assert box.text == "xab" and views(screen)[-1].message.chosen == 2


async def test_a_deleted_message_comes_back_with_ctrl_z(tiny_eos_model_path, mira_card):
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        await send(pilot, screen, "Hello.")
        await send(pilot, screen, "Are you there?")
        before = [v.message.id for v in views(screen) if v.message is not None]
        await pilot.press("alt+up", "alt+up")  # the user's last message
        await pilot.press("f8")
        await _until_screen(pilot, app, ConfirmScreen)
        await pilot.press("y")
        await wait_for(
            pilot, lambda: app.screen is screen and len(views(screen)) == len(before) - 1
        )
        # Ctrl+Z with text in the box undoes the typing, not the deletion.
        box = screen.query_one(ChatInput)
        box.insert("typo")
        await pilot.press("ctrl+z")
        await pilot.pause()
        assert box.text == "" and len(views(screen)) == len(before) - 1
        await pilot.press("ctrl+z")  # the box is empty now: the message comes back
        await wait_for(pilot, lambda: len(views(screen)) == len(before))
        assert [v.message.id for v in views(screen) if v.message is not None] == before
        assert "Are you there?" in screen_text(app)
        assert [m.id for m in app.service.store.recent_messages(screen.conv_id, 10)] == before


async def test_branch_from_a_message_opens_a_conversation_sharing_the_story(
    scripted_model, mira_card
):
    app = KotoniaApp(tiny_settings(scripted_model('*Mira nods.* "Yes."')))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        await send(pilot, screen, "First question.")
        await send(pilot, screen, "Second question.")
        original = screen.conv_id
        count = len(views(screen))
        assert count == 5  # the greeting, then two questions and their replies
        await pilot.press("alt+up", "alt+up", "alt+up")  # message #3 of 5
        selected = screen.selected
        assert selected is not None and selected.number == count - 2
        await pilot.press("ctrl+n")
        await wait_for(
            pilot, lambda: isinstance(app.screen, ChatScreen) and app.screen.conv_id != original
        )
        branch = app.screen
        assert isinstance(branch, ChatScreen)
        await pilot.pause()
        assert [v.text for v in views(branch)] == [
            m.text for m in app.service.store.recent_messages(original, 10)[: count - 2]
        ]
        assert "(branch at #3)" in str(branch.sub_title)
        await send(pilot, branch, "A different second question.")
        kept = [m.text for m in app.service.store.recent_messages(original, 10)]
        assert "Second question." in kept and "A different second question." not in kept
        assert len(kept) == count


async def test_the_new_screens_fit_80x24(tiny_eos_model_path, mira_card, tmp_path):
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=SMALL) as pilot:
        await asyncio.wait_for(app.wait_service(), 30)
        await _until_screen(pilot, app, PickerScreen)
        await pilot.press("f5")
        await _until_screen(pilot, app, PersonasScreen)
        await wait_for(pilot, lambda: "★ User" in screen_text(app))
        text = screen_text(app)
        assert "n New persona" in text and "Enter edits" in text
        await pilot.press("n")
        await _until_screen(pilot, app, PersonaEditScreen)
        text = screen_text(app)
        # The whole dialog fits: the boxes (named by their placeholders), the note, the buttons.
        assert "Name" in text and "a picture file" in text and "Ctrl+S saves" in text
        assert "Save" in text and "Cancel" in text
        await pilot.press("escape")
        await _until_screen(pilot, app, PersonasScreen)
        await pilot.press("escape")
        await _until_screen(pilot, app, PickerScreen)
        await pilot.press("enter")
        await _until_screen(pilot, app, ConversationsScreen)
        assert "You play User" in screen_text(app)
        await pilot.press("i")
        await _until_screen(pilot, app, OpenFileScreen)
        assert "Import a chat" in screen_text(app)
        await pilot.press("escape")
        await _until_screen(pilot, app, ConversationsScreen)


async def test_the_cursor_stays_on_its_conversation_when_the_list_re_sorts(
    tiny_eos_model_path, mira_card
):
    """The list is newest first; a conversation that gets a new message moves to the top, and
    the cursor moves with it (not to whichever conversation took its row)."""
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=SIZE) as pilot:
        first = (await open_new_chat(app, pilot)).conv_id
        await pilot.press("ctrl+b")
        await _until_screen(pilot, app, ConversationsScreen)
        await pilot.press("c")  # a duplicate: now the newest, listed first
        await wait_for(pilot, lambda: len(_stored_conversations(app)) == 2)
        copy = max(_stored_conversations(app))
        screen = app.screen
        assert isinstance(screen, ConversationsScreen)
        listing = screen.query_one("#conv-list", ListView)
        await wait_for(pilot, lambda: len(listing.query(ConversationItem)) == 2)
        assert listing.highlighted_child.conversation.id == copy  # the new one is chosen

        await _highlight(pilot, app, first)
        assert listing.index == 1
        assert app.service is not None
        app.service.store.add_messages(
            first, [Message(role=Role.USER, speaker="User", text="Back again.")]
        )
        screen.load_conversations()
        await wait_for(
            pilot,
            lambda: [i.conversation.id for i in listing.query(ConversationItem)] == [first, copy],
        )
        await pilot.pause()
        assert listing.highlighted_child.conversation.id == first


async def test_the_list_names_a_conversation_by_its_id_never_as_a_message_number(
    tiny_eos_model_path, mira_card
):
    """The list showed a conversation's store id as "#2" ("Conversation 1 (branch at #4)  #3 ·
    4 messages"), and its delete dialog "(#2, 2 messages)": everywhere else "#2" is a
    conversation's second message. Now both say "id 2", what `--conversation ID` and
    `kotonia delete ID` take, and nothing in a row or the dialog reads "#N"."""
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=SIZE) as pilot:
        service = await app.wait_service()
        assert service is not None
        card = service.library.get("mira")
        untitled = service.new_conversation(card)  # the greeting, then two lines: 3 messages
        said = [Message(role=Role.USER, speaker="User", text=f"Line {i}.") for i in range(2)]
        service.store.add_messages(untitled.id, said)
        titled = service.new_conversation(card, title="Storm night")  # its greeting alone
        service.store.add_messages(titled.id, said[:1])
        assert (untitled.id, titled.id) == (1, 2)

        await _until_screen(pilot, app, PickerScreen)
        await pilot.press("enter")
        await _until_screen(pilot, app, ConversationsScreen)
        listing = app.screen.query_one("#conv-list", ListView)
        await wait_for(pilot, lambda: len(listing.query(ConversationItem)) == 2)
        rows = [str(item.query_one(Label).render()) for item in listing.query(ConversationItem)]
        assert rows[0].startswith("Storm night  id 2 · 2 messages · ")
        assert rows[1].startswith("Conversation 1  id 1 · 3 messages · ")
        assert not any(re.search(r"#\d", row) for row in rows)

        await _highlight(pilot, app, titled.id)
        await pilot.press("d")
        await _until_screen(pilot, app, ConfirmScreen)
        dialog = app.screen
        assert isinstance(dialog, ConfirmScreen)
        assert dialog.question.startswith(
            "Delete Storm night (id 2, 2 messages) and its memory?\n\n"
        )
        assert "(id 2, 2 messages)" in screen_text(app)
        assert not re.search(r"#\d", dialog.question)
        await pilot.press("n")
        await _until_screen(pilot, app, ConversationsScreen)


def _rows(listing: ListView) -> list[tuple[int, str]]:
    """The list's rows as shown, each with its conversation's id."""
    return [
        (item.conversation.id, str(item.query_one(Label).render()))
        for item in listing.query(ConversationItem)
    ]


async def test_an_imported_chat_is_listed_by_the_age_of_its_last_message(
    on_the_fake_engine, mira_card, tmp_path
):
    """A SillyTavern chat two years old read "just now" in the list once imported (the row's
    age was the import's time), and sat above the chats written since. Now the row gives its
    last message's age, the list its place by it (the cursor goes to it), and a new message
    in it makes it "just now" and first again.

    Fake engine: this test is about the list's ages and order, which do not depend on the
    model."""
    last = utcnow() - timedelta(days=2 * 365 + 20)
    said = [
        ("Mira", False, "*The lamp turns.* Who climbs my stairs?"),
        ("Ann", True, "Only me, with the oil."),
        ("Mira", False, "Then come up. The glass wants cleaning."),
    ]
    begun = f"{last - timedelta(minutes=len(said)):%Y-%m-%d@%Hh%Mm%Ss}"
    source = tmp_path / f"Mira - {begun}.jsonl"
    lines: list[dict[str, object]] = [
        {"user_name": "Ann", "character_name": "Mira", "create_date": begun}
    ]
    for i, (name, is_user, text) in enumerate(said):
        when = last - timedelta(minutes=len(said) - 1 - i)  # as SillyTavern writes send_date
        lines.append(
            {
                "name": name,
                "is_user": is_user,
                "send_date": f"{when:%B %d, %Y %I:%M%p}",
                "mes": text,
            }
        )
    source.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")

    app = KotoniaApp(fake_settings())
    async with app.run_test(size=SIZE) as pilot:
        fresh = (await open_new_chat(app, pilot)).conv_id  # its greeting, written now
        await pilot.press("ctrl+b")
        await _until_screen(pilot, app, ConversationsScreen)
        listing = app.screen.query_one("#conv-list", ListView)
        await pilot.press("i")
        await _until_screen(pilot, app, OpenFileScreen)
        app.screen.query_one("#file-path", Input).value = str(source)
        await pilot.press("enter")
        await _until_screen(pilot, app, ConversationsScreen)
        await wait_for(pilot, lambda: len(_rows(listing)) == 2)
        await pilot.pause()
        (first, first_row), (imported, row) = _rows(listing)
        assert first == fresh and first_row.startswith(f"Conversation {fresh}  id {fresh} · ")
        assert f"  id {imported} · 3 messages · 2 y ago · as Ann" in row, row
        assert "just now" not in row
        assert listing.highlighted_child.conversation.id == imported

        await pilot.press("enter")  # open it and write in it
        await _until_screen(pilot, app, ChatScreen)
        assert isinstance(app.screen, ChatScreen)
        await send(pilot, app.screen, "The glass is clean now.")
        await pilot.press("ctrl+b")
        await _until_screen(pilot, app, ConversationsScreen)
        await wait_for(pilot, lambda: [i for i, _row in _rows(listing)] == [imported, fresh])
        assert f"  id {imported} · 5 messages · just now" in _rows(listing)[0][1]


@pytest.mark.parametrize(
    ("days", "shown"),
    [
        (1, "1 d ago"),
        (59, "59 d ago"),
        (60, "2 mo ago"),
        (280, "9 mo ago"),
        (729, "24 mo ago"),
        (730, "2 y ago"),
        (3 * 365, "3 y ago"),
    ],
)
def test_a_rows_age_goes_on_in_months_then_years(days, shown):
    """What the list says of an imported chat's last message: "730 d ago" was a sum to do."""
    now = utcnow()
    assert age(now - timedelta(days=days), now) == shown
