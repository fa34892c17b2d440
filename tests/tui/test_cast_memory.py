"""Pilot test of the memory by speaker (issue 31) on a tiny real GGUF: in a group, the page
(Alt+W, or the inspector's "By speaker") shows each member's and the player's own items, and
what one member said is not listed under another. The chapter and its ledger entries are
written through the store, as a fold would write them (the chronicler is not what is tested)."""

from __future__ import annotations

import json
from pathlib import Path

from textual.content import Content
from textual.widgets import Button, Static

from kotonia_tui.config import app_dirs
from kotonia_tui.domain import Chapter, LedgerKind, Message, Role
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.screens.chat import ChatScreen
from kotonia_tui.tui.screens.dialogs import TextScreen
from kotonia_tui.tui.widgets.inspector import InspectorPane
from tests.characters.builders import v2_card
from tests.scripted_chapters import ledger_entry
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import wait_for

SIZE = (120, 40)


def _blocks(app: KotoniaApp) -> list[str]:
    """The page's blocks as plain text (each speaker is one block)."""
    texts = []
    for block in app.screen.query(".page-block").results(Static):
        content = block.content
        texts.append(content.plain if isinstance(content, Content) else str(content))
    return texts


def _block_of(app: KotoniaApp, name: str) -> str:
    return next(b for b in _blocks(app) if b.startswith(name))


async def test_the_memory_by_speaker_keeps_what_each_member_said_apart(
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
        store = service.store

        def add(role: Role, speaker: str, text: str, key: str | None = None) -> int:
            message = Message(
                conversation_id=conv.id, role=role, speaker=speaker, text=text, character_key=key
            )
            return store.add_message(message).id

        ask = add(Role.USER, "User", "Where is the spare lamp oil?")
        hidden = add(Role.CHARACTER, "Mira", "I hid the lamp oil under the cellar stairs.", "mira")
        nets = add(Role.CHARACTER, "Wren", "I only know about the torn nets.", "wren")
        structure = {
            "time": "",
            "events": [{"text": "Mira hid the lamp oil under the cellar stairs", "ids": [hidden]}],
            "claims": [{"text": "Wren says she knows only about the torn nets", "ids": [nets]}],
            "ledger": [],
            "resolved": [],
            "dropped": [],
        }
        store.store_chapter(
            Chapter(
                conversation_id=conv.id,
                first_message_id=ask,
                last_message_id=nets,
                text="x",
                structure=json.dumps(structure),
            ),
            [
                ledger_entry(
                    conv.id,
                    LedgerKind.PROMISE,
                    "Mira will keep the oil hidden from Wren",
                    hidden,
                    subject="Mira",
                ),
                ledger_entry(conv.id, LedgerKind.THREAD, "Who tore the nets", nets, subject="Wren"),
                ledger_entry(
                    conv.id, LedgerKind.USER_FACT, "User needs lamp oil", ask, subject="User"
                ),
            ],
        )
        app.open_conversation(conv.id)
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        chat = app.screen
        await pilot.pause()

        await pilot.press("alt+w")
        await wait_for(pilot, lambda: isinstance(app.screen, TextScreen))
        mira = _block_of(app, "Mira")
        wren = _block_of(app, "Wren")
        user = _block_of(app, "User (you)")
        assert "hid the lamp oil" in mira and "keep the oil hidden" in mira
        assert "1 of their lines cited" in mira
        # Wren never said where the oil is: it is not listed as hers, nor is her thread Mira's.
        assert "lamp oil" not in wren and "cellar" not in wren
        assert "torn nets" in wren and "Who tore the nets" in wren
        assert "nets" not in mira
        assert "User needs lamp oil" in user and "cellar" not in user
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is chat)

        # The same page from the inspector's button.
        await pilot.press("f2")
        inspector = chat.query_one(InspectorPane)
        await wait_for(pilot, lambda: inspector.display and inspector.view is not None)
        button = inspector.query_one("#by-speaker", Button)
        assert button.display
        button.press()
        await wait_for(pilot, lambda: isinstance(app.screen, TextScreen))
        assert "hid the lamp oil" in _block_of(app, "Mira")
