"""The character's expression beside the chat follows the last reply's mood (in a group, the
speaker's own pictures), on a scripted tiny GGUF."""

from __future__ import annotations

import json

from textual.widgets import ListView, Static

from kotonia_tui.config import app_dirs
from kotonia_tui.domain import ReplyOrder
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.screens.chat import ChatScreen
from kotonia_tui.tui.screens.choose import ChoiceItem, ChooseScreen
from kotonia_tui.tui.widgets.expression import ExpressionPane
from kotonia_tui.tui.widgets.portrait import Portrait
from tests.characters.builders import charx_card, picture, v2_card, v3_card
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import open_new_chat, send, wait_for
from tests.tui.screen_text import screen_text

PICTURES = {"joy": "yellow", "angry": "red", "neutral": "gray"}


def _expression_card(
    name: str = "Mira", pictures: dict[str, str] = PICTURES, first_mes: str = "*Mira smiles.*"
) -> None:
    """A CHARX card with expression pictures (Mira's three by default; her greeting smiles)."""
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    assets = [
        {
            "type": "emotion",
            "uri": f"embeded://assets/emotion/{mood}.png",
            "name": mood,
            "ext": "png",
        }
        for mood in pictures
    ]
    card = v3_card(name, description=f"{name} keeps watch.", first_mes=first_mes, assets=assets)
    files = {f"assets/emotion/{n}.png": picture(color=c, size=(8, 8)) for n, c in pictures.items()}
    charx_card(folder / f"{name.lower()}.charx", card, files)


def _shown(pane: ExpressionPane) -> bytes | None:
    portrait = pane.query_one(Portrait)
    return portrait._card_image.data if portrait._card_image is not None else None


async def test_the_expression_follows_the_reply(scripted_model) -> None:
    _expression_card()
    app = KotoniaApp(tiny_settings(scripted_model("*She glares at the storm.*")))
    async with app.run_test(size=(120, 40)) as pilot:
        chat = await open_new_chat(app, pilot)
        pane = chat.query_one(ExpressionPane)
        await wait_for(pilot, lambda: pane.chosen is not None)
        assert pane.display and pane.chosen is not None and pane.chosen.word == "smiles"
        assert _shown(pane) == picture(color="yellow", size=(8, 8))
        caption = pane.query_one("#expression-caption", Static)
        assert str(caption.render()) == "joy · “smiles”"

        await send(pilot, chat, "The storm is getting worse.")
        await wait_for(pilot, lambda: pane.chosen is not None and pane.chosen.word == "glares")
        assert _shown(pane) == picture(color="red", size=(8, 8))
        assert "mood: angry" in screen_text(app)


async def test_a_small_terminal_keeps_the_mood_and_drops_the_picture(scripted_model) -> None:
    _expression_card()
    app = KotoniaApp(tiny_settings(scripted_model("Hello.")))
    async with app.run_test(size=(80, 24)) as pilot:
        chat = await open_new_chat(app, pilot)
        pane = chat.query_one(ExpressionPane)
        await wait_for(pilot, lambda: pane.chosen is not None)
        assert pane.has_class("-shown") and not pane.display  # no room for it at 80x24
        assert "mood: joy" in screen_text(app)
        await send(pilot, chat, "Hi.")
        await wait_for(pilot, lambda: "mood: neutral" in screen_text(app))


async def _pick(pilot, app: KotoniaApp, chat: ChatScreen, key: str) -> None:
    """Alt+P, then the member `key`, and wait until its reply ended."""
    await pilot.press("alt+p")
    await wait_for(pilot, lambda: isinstance(app.screen, ChooseScreen))
    listing = app.screen.query_one("#choices", ListView)
    listing.index = [item.value for item in listing.query(ChoiceItem)].index(key)
    ended = chat.runs_ended
    await pilot.press("enter")
    await wait_for(pilot, lambda: chat.runs_ended > ended and not chat.streaming, timeout=60)
    await pilot.pause()


async def test_in_a_group_the_expression_follows_the_speaker(scripted_model) -> None:
    """Each member's reply shows that member's own picture for its mood; a member with no
    expression pictures shows its card's picture and says so."""
    _expression_card()
    _expression_card("Wren", {"joy": "blue", "angry": "green"}, "*Wren grins.*")
    folder = app_dirs().user_characters
    (folder / "rowan.json").write_text(json.dumps(v2_card("Rowan", first_mes="Hm.")))
    app = KotoniaApp(tiny_settings(scripted_model("*She glares at the storm.*")))
    async with app.run_test(size=(120, 40)) as pilot:
        service = await app.wait_service()
        assert service is not None
        cards = [service.library.get(key) for key in ("mira", "wren", "rowan")]
        conv = service.groups.new_group(cards)
        service.store.set_reply_order(conv.id, ReplyOrder.MANUAL)
        app.open_conversation(conv.id)
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen))
        await pilot.pause()
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        pane = chat.query_one(ExpressionPane)
        # The last greeting is Rowan's, who has no expression pictures.
        await wait_for(pilot, lambda: "Rowan: no expression pictures" in screen_text(app))

        await _pick(pilot, app, chat, "mira")
        await wait_for(pilot, lambda: pane.speaker == "Mira" and pane.chosen is not None)
        assert pane.chosen is not None and pane.chosen.word == "glares"
        assert _shown(pane) == picture(color="red", size=(8, 8))
        assert "Mira · mood: angry" in screen_text(app)
        assert "Mira: angry · “glares”" in screen_text(app)

        await _pick(pilot, app, chat, "wren")
        await wait_for(pilot, lambda: pane.speaker == "Wren")
        assert _shown(pane) == picture(color="green", size=(8, 8))  # Wren's own "angry"
        assert "Wren · mood: angry" in screen_text(app)
        assert "Wren: angry · “glares”" in screen_text(app)
