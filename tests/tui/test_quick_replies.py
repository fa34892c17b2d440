"""Pilot test of the quick-reply editor (issue 31, Alt+K) on a tiny real GGUF: a reply is
added as one member's own, edited into a global one that goes into the box, used with Alt+1,
and deleted; an empty text is refused in the form and nothing is stored."""

from __future__ import annotations

import json
from pathlib import Path

from textual.widgets import Checkbox, Input, ListView, Select, Static, TextArea

from kotonia_tui.config import app_dirs
from kotonia_tui.domain import ReplyOrder
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.screens.chat import ChatScreen
from kotonia_tui.tui.screens.dialogs import ConfirmScreen
from kotonia_tui.tui.screens.quick_replies import (
    GLOBAL,
    QuickRepliesScreen,
    QuickReplyForm,
    QuickReplyItem,
)
from kotonia_tui.tui.widgets.chat_input import ChatInput
from tests.characters.builders import v2_card
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import wait_for

SIZE = (120, 40)


async def _fill(pilot, app: KotoniaApp, label: str, text: str, scope: str, send: bool) -> None:
    form = app.screen
    assert isinstance(form, QuickReplyForm)
    form.query_one("#qr-label", Input).value = label
    form.query_one("#qr-text", TextArea).text = text
    form.query_one("#qr-scope", Select).value = scope
    form.query_one("#qr-send", Checkbox).value = send
    await pilot.press("ctrl+s")


async def test_quick_replies_are_added_edited_used_and_deleted_in_the_app(
    tiny_model_path, mira_card, kotonia_home: Path
):
    folder = app_dirs().user_characters
    card = v2_card("Wren", description="Wren mends nets.", first_mes="Wren nods.")
    (folder / "wren.json").write_text(json.dumps(card), encoding="utf-8")
    app = KotoniaApp(tiny_settings(tiny_model_path, reply_max_tokens=16))
    async with app.run_test(size=SIZE) as pilot:
        service = await app.wait_service()
        assert service is not None
        conv = service.groups.new_group([service.library.get("mira"), service.library.get("wren")])
        service.store.set_reply_order(conv.id, ReplyOrder.MANUAL)
        app.open_conversation(conv.id)
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        await pilot.pause()
        chat = app.screen
        assert isinstance(chat, ChatScreen)

        await pilot.press("alt+k")
        await wait_for(pilot, lambda: isinstance(app.screen, QuickRepliesScreen))
        editor = app.screen
        assert isinstance(editor, QuickRepliesScreen)
        assert "No quick replies yet" in str(editor.query_one("#qr-empty", Static).render())

        # Added as Wren's own, sent at once.
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, QuickReplyForm))
        await _fill(pilot, app, "Nets", "How are the nets?", "wren", True)
        await wait_for(pilot, lambda: editor.changed == 1)
        stored = service.store.quick_replies(["wren"])
        assert [(q.label, q.text, q.character_key, q.send) for q in stored] == [
            ("Nets", "How are the nets?", "wren", True)
        ]
        assert service.store.quick_replies() == []  # not a global one

        # An empty text is refused in the form: nothing is stored, the form stays open.
        await pilot.press("enter")  # edits the highlighted reply
        await wait_for(pilot, lambda: isinstance(app.screen, QuickReplyForm))
        await _fill(pilot, app, "Nets", "   ", "wren", True)
        await pilot.pause()
        form = app.screen
        assert isinstance(form, QuickReplyForm)
        error = form.query_one("#qr-error", Static)
        assert "its text is empty" in str(error.render())
        # Edited into a global reply that goes into the box.
        await _fill(pilot, app, "Wave", "*waves*", GLOBAL, False)
        await wait_for(pilot, lambda: editor.changed == 2)
        assert [
            (q.label, q.text, q.character_key, q.send) for q in service.store.quick_replies()
        ] == [("Wave", "*waves*", None, False)]
        listing = editor.query_one("#qr-list", ListView)
        shown = [item.reply.label for item in listing.query(QuickReplyItem)]
        assert shown == ["Wave"]
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is chat)

        await pilot.press("alt+1")  # the edited reply, put into the box
        await pilot.pause()
        assert chat.query_one(ChatInput).text == "*waves*"
        chat.query_one(ChatInput).clear()

        await pilot.press("alt+k")
        await wait_for(pilot, lambda: isinstance(app.screen, QuickRepliesScreen))
        again = app.screen
        assert isinstance(again, QuickRepliesScreen)
        await pilot.press("delete")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(pilot, lambda: again.changed == 1)
        assert service.store.quick_replies(["mira", "wren"]) == []
