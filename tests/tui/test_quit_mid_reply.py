"""Ctrl+Q while a reply is being written: the part written is kept as a stopped reply (stored,
and shown marked when the conversation is opened again), the conversation's KV state is saved
with it, and the next start resumes from that state: its first turn evaluates only the new
message. Real engine on a tiny GGUF that never ends its reply (so the reply is always under
way when Ctrl+Q comes), saved states on; the app is driven with Pilot."""

from __future__ import annotations

from kotonia_tui.chat.bootstrap import open_store
from kotonia_tui.config import app_dirs
from kotonia_tui.domain import MessageStatus, Role
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.screens.chat import ChatScreen
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import open_new_chat, send, views, wait_for
from tests.tui.screen_text import screen_text
from tests.tui.test_chat import SIZE, _press_while_streaming


async def test_quitting_mid_reply_keeps_it_and_the_next_start_resumes_from_it(
    tiny_noeos_model_path, mira_card
):
    settings = tiny_settings(tiny_noeos_model_path, reply_max_tokens=1600)
    app = KotoniaApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        conv_id = screen.conv_id
        await _press_while_streaming(app, pilot, screen, "ctrl+q")
    with open_store(app.settings) as store:
        stopped = store.last_message(conv_id)
        assert stopped.role is Role.CHARACTER and stopped.text
        assert stopped.status is MessageStatus.CANCELLED
        assert stopped.status_reason == "stopped: the app was closed"
        written = store.last_turn_metrics(conv_id).generated
    assert 0 < written < 1600
    (saved,) = (app_dirs().cache / "kv-state").glob(f"*-conversation-*-{conv_id}.kvstate")
    assert saved.stat().st_size > 0

    again = KotoniaApp(
        tiny_settings(tiny_noeos_model_path, reply_max_tokens=16), open_conversation_id=conv_id
    )
    async with again.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: getattr(again.screen, "conv_id", None) == conv_id)
        reopened = again.screen
        assert isinstance(reopened, ChatScreen)
        screen = reopened
        await pilot.pause()
        shown = views(screen)[-1]
        assert shown.message is not None and shown.message.id == stopped.id
        assert shown.text == stopped.text
        assert "stopped: the app was closed" in screen_text(again)
        await send(pilot, screen, "Go on.")
        service = again.service
        assert service is not None
        metrics = service.store.last_turn_metrics(conv_id)
    # Resumed from the state saved at quit, the stopped reply included: only the new message
    # and the reply's opening were read.
    assert metrics.restored == metrics.reused > written
    assert metrics.evaluated < 40, metrics
