"""The app (Textual pilot) on the GLM stand-ins: an image turn, and what a thinking model's
empty block looks like to the user (nothing)."""

from __future__ import annotations

from kotonia_tui.chat.turn import NO_REPLY
from kotonia_tui.domain import Role
from kotonia_tui.tui.app import KotoniaApp
from tests.tiny_models import write_tiny_png
from tests.tui.conftest import mira_card, tiny_settings
from tests.tui.helpers import attach, open_new_chat, send, views
from tests.tui.screen_text import screen_text

__all__ = ["mira_card"]

SIZE = (120, 40)


async def test_an_image_turn_shows_the_reply_without_its_thinking_block(
    scripted_glm, mmproj_for, mira_card, tmp_path
):
    model = scripted_glm("<think></think>\nThe lamp glows amber.")
    png = write_tiny_png(tmp_path / "lamp.png", (32, 48))
    app = KotoniaApp(tiny_settings(model, mmproj_path=mmproj_for(model)))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        await attach(pilot, screen, png)
        await send(pilot, screen, "What colour is the lamp?")
        user, reply = views(screen)[-2:]
        assert user.message is not None and len(user.message.images) == 1
        assert reply.role is Role.CHARACTER and reply.text == "The lamp glows amber."
        shown = screen_text(app)
        assert "The lamp glows amber." in shown and "think>" not in shown


async def test_a_reply_that_is_only_an_empty_thinking_block_leaves_no_empty_line(
    scripted_glm, mira_card
):
    app = KotoniaApp(tiny_settings(scripted_glm("<think></think>")))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        await send(pilot, screen, "Hello?")
        assert [v.role for v in views(screen)] == [Role.CHARACTER, Role.USER]
        assert any(NO_REPLY in str(n.message) for n in app._notifications)
