"""Snapshots of the main screens at 120x40, on deterministic data.

The picker shows the shipped cards; the chat shows a conversation imported into the store (no
model text), with the memory inspector open. The EOS model is loaded so nothing random appears.
"""

from __future__ import annotations

import asyncio

from kotonia_tui.chat.bootstrap import open_store
from kotonia_tui.domain import Conversation, Message, Role
from kotonia_tui.memory.segments import parse_segments
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.screens.chat import ChatScreen
from kotonia_tui.tui.widgets.chat_input import ChatInput
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import wait_for

SIZE = (120, 40)

LINES = [
    (
        Role.CHARACTER,
        "Mira",
        '*Mira sets down her lantern.* "You made it through the storm, User."',
    ),
    (Role.USER, "User", "I did. Is there somewhere I can dry my coat?"),
    (
        Role.CHARACTER,
        "Mira",
        '*She points to the stove.* "Hang it there." `He looks half frozen.`',
    ),
]


def test_picker_snapshot(snap_compare, tiny_eos_model_path):
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))

    async def ready(pilot) -> None:
        await asyncio.wait_for(app.wait_service(), 30)
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)


def test_chat_with_inspector_snapshot(snap_compare, tiny_eos_model_path, mira_card):
    settings = tiny_settings(tiny_eos_model_path)
    with open_store(settings) as store:
        messages = [
            Message(
                role=role,
                speaker=speaker,
                text=text,
                segments=parse_segments(
                    text, speaker=speaker, listener="User" if speaker == "Mira" else "Mira"
                ),
            )
            for role, speaker, text in LINES
        ]
        conv = store.import_conversation(
            Conversation(character_key="mira", character_name="Mira", persona_name="User"),
            messages,
        )
    app = KotoniaApp(settings, open_conversation_id=conv.id)

    async def ready(pilot) -> None:
        await asyncio.wait_for(app.wait_service(), 30)
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        await wait_for(pilot, lambda: app.screen.query("#input"))
        # A steady cursor: a blinking one is caught in either phase, depending on timing.
        app.screen.query_one("#input", ChatInput).cursor_blink = False
        await pilot.press("f2")
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)
