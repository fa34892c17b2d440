"""The character's expression beside the chat follows the last reply's mood."""

from __future__ import annotations

from textual.widgets import Static

from kotonia_tui.config import app_dirs
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.widgets.expression import ExpressionPane
from kotonia_tui.tui.widgets.portrait import Portrait
from tests.characters.builders import charx_card, picture, v3_card
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import open_new_chat, send, wait_for
from tests.tui.screen_text import screen_text

PICTURES = {"joy": "yellow", "angry": "red", "neutral": "gray"}


def _expression_card() -> None:
    """Mira as a CHARX card with three expression pictures; her greeting smiles."""
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    assets = [
        {
            "type": "emotion",
            "uri": f"embeded://assets/emotion/{name}.png",
            "name": name,
            "ext": "png",
        }
        for name in PICTURES
    ]
    card = v3_card(
        "Mira", description="Mira keeps the lighthouse.", first_mes="*Mira smiles.*", assets=assets
    )
    files = {f"assets/emotion/{n}.png": picture(color=c, size=(8, 8)) for n, c in PICTURES.items()}
    charx_card(folder / "mira.charx", card, files)


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
