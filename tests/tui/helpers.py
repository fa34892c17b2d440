"""Driving the app in Pilot tests."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from textual.app import App
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import Input, ListView

from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.screens.chat import ChatScreen
from kotonia_tui.tui.screens.conversations import ConversationsScreen
from kotonia_tui.tui.screens.dialogs import AttachScreen, TextScreen
from kotonia_tui.tui.screens.picker import CardItem, PickerScreen
from kotonia_tui.tui.widgets.chat_input import ChatInput
from kotonia_tui.tui.widgets.message_view import MessageView
from tests.tui.screen_text import screen_text


async def wait_for(
    pilot: Pilot[Any],
    condition,
    timeout: float = 20.0,
    step: float = 0.05,
    *,
    what: str = "the app",
):
    """Pause until `condition()` holds; past `timeout` seconds, fail naming `what`."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await pilot.pause(step)


async def open_new_chat(app: KotoniaApp, pilot: Pilot[Any], key: str | None = "mira") -> ChatScreen:
    """Pick the character, then start a new conversation with its first message."""
    await asyncio.wait_for(app.wait_service(), 30)
    await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen))
    listing = app.screen.query_one("#card-list", ListView)
    keys = [item.card.key for item in listing.query(CardItem)]
    listing.index = keys.index(key) if key is not None else 0
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(app.screen, ConversationsScreen))
    await pilot.press("n", "enter")
    await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
    await pilot.pause()
    assert isinstance(app.screen, ChatScreen)
    return app.screen


async def send(pilot: Pilot[Any], screen: ChatScreen, text: str) -> None:
    """Type and send a message, then wait for the reply to finish."""
    ended = screen.turns_ended
    screen.query_one(ChatInput).insert(text)
    await pilot.press("enter")
    await wait_for(pilot, lambda: screen.turns_ended > ended and not screen.streaming, timeout=120)
    await pilot.pause()


async def run_key(pilot: Pilot[Any], screen: ChatScreen, key: str) -> None:
    """Press a key that starts a turn (regenerate, continue) and wait for its end."""
    ended = screen.turns_ended
    await pilot.press(key)
    await wait_for(pilot, lambda: screen.turns_ended > ended and not screen.streaming, timeout=120)
    await pilot.pause()


def views(screen: ChatScreen) -> list[MessageView]:
    return screen._views()


async def visit(pilot: Pilot[Any], app: App[Any], key: str, kind: type) -> Screen[object]:
    """Press `key` and wait until a screen of type `kind` is on top; returns the screen under."""
    under = app.screen
    await pilot.press(key)
    await wait_for(pilot, lambda: isinstance(app.screen, kind))
    await pilot.pause()
    return under


async def leave(pilot: Pilot[Any], app: App[Any], under: Screen[object], key: str) -> None:
    """Press `key` and wait until `under` is the top screen again."""
    await pilot.press(key)
    await wait_for(pilot, lambda: app.screen is under)


async def search_palette(pilot: Pilot[Any], query: str) -> None:
    """Open the command palette and type `query` (Escape closes it)."""
    await pilot.press("ctrl+p")
    await pilot.pause(0.2)
    await pilot.press(*query)
    await pilot.pause(0.5)


async def attach(pilot: Pilot[Any], screen: ChatScreen, path: object) -> None:
    """Attach an image file through the F3 dialog and come back to the chat."""
    app = screen.app
    await pilot.press("f3")
    await wait_for(pilot, lambda: isinstance(app.screen, AttachScreen))
    app.screen.query_one("#file-path", Input).value = str(path)
    await pilot.press("enter")
    await wait_for(pilot, lambda: app.screen is screen)
    await pilot.pause()


async def open_listed(pilot: Pilot[Any], app: App[Any], listing: ListView, index: int) -> str:
    """Open a list's item as a user does (focus, move to it, Enter); the page's text."""
    listing.focus()
    listing.index = index
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(app.screen, TextScreen))
    return screen_text(app)
