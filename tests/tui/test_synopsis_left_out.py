"""Pilot test on a tiny real GGUF: the sentences a synopsis draft left out (they rest on nothing
the fold read, D-44) can be read in the app when the synopsis has a single version. The
inspector says how many there are, and its button opens the versions page that lists them.
The synopsis is written through the store, as a major fold would write it (the chronicler is
not what is tested)."""

from __future__ import annotations

from pathlib import Path

from textual.content import Content
from textual.widgets import Button, Static

from kotonia_tui.domain import Message, Role, Synopsis
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.screens.chat import ChatScreen
from kotonia_tui.tui.screens.dialogs import TextScreen
from kotonia_tui.tui.widgets.inspector import InspectorPane
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import wait_for

SIZE = (120, 40)
LEFT_OUT = "So far in the story, I have not found a single word of this story."


async def test_what_the_only_synopsis_left_out_is_one_button_away(
    tiny_model_path, mira_card, kotonia_home: Path
):
    app = KotoniaApp(tiny_settings(tiny_model_path, reply_max_tokens=16))
    async with app.run_test(size=SIZE) as pilot:
        service = await app.wait_service()
        assert service is not None
        conv = service.new_conversation(service.library.get("mira"))
        said = service.store.add_message(
            Message(conversation_id=conv.id, role=Role.USER, speaker="User", text="I'm Ann.")
        )
        service.store.add_synopsis(
            Synopsis(
                conversation_id=conv.id,
                version=0,
                text="Ann came to the lighthouse.",
                through_message_id=said.id,
                dropped=(LEFT_OUT,),
            ),
            [],
        )
        app.open_conversation(conv.id)
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        chat = app.screen
        await pilot.press("f2")
        inspector = chat.query_one(InspectorPane)
        await wait_for(pilot, lambda: inspector.display and inspector.view is not None)
        pane = "\n".join(
            block.content.plain
            for block in inspector.query(Static).results(Static)
            if isinstance(block.content, Content)
        )
        assert "1 sentence of the draft left out: resting on nothing it folds" in pane
        button = inspector.query_one("#synopsis-versions", Button)
        assert button.display and "Left out (1)" in str(button.label)
        button.press()
        await wait_for(pilot, lambda: isinstance(app.screen, TextScreen))
        await pilot.pause()
        page = "\n".join(
            block.content.plain
            for block in app.screen.query(".page-block").results(Static)
            if isinstance(block.content, Content)
        )
        assert "Ann came to the lighthouse." in page
        assert f"left out of the draft (it rests on nothing it folds): {LEFT_OUT}" in page
