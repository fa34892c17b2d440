"""Heavy work for a turn (rendering and tokenizing a large setup, scanning a lorebook with a
slow key) runs off the event loop: the UI keeps answering while a prompt is prepared."""

from __future__ import annotations

import asyncio
import json

from kotonia_tui.chat.bootstrap import open_service
from kotonia_tui.config import app_dirs
from tests.settings import tiny_settings

from .corpus import CATASTROPHIC_KEY, regex_trap_card


async def test_the_event_loop_runs_while_a_slow_prompt_is_prepared(short_reply_model):
    """The trap card's lorebook key runs up to its time bound on every scan of the greeting;
    before, `send` prepared the prompt on the event loop and nothing else ran meanwhile (a
    TUI froze; with this key, for good)."""
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trap.json").write_text(json.dumps(regex_trap_card()), encoding="utf-8")
    service = open_service(tiny_settings(short_reply_model, n_ctx=2048))
    notices: list[str] = []
    service.subscribe(lambda event: notices.append(getattr(event, "text", "")))
    await service.start()
    try:
        conv = service.new_conversation(service.library.get("trap"))
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.005)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        start = ticks
        turn = await service.send(conv.id, "Is the lamp lit?")
        during = ticks - start
        done.set()
        await task
        result = await turn.wait()
        assert result.error is None, result.error
        # The key ran to its bound (0.25 s) while the loop kept ticking every 5 ms.
        assert during >= 5, during
        assert sum(CATASTROPHIC_KEY in n for n in notices) == 1, notices
    finally:
        await service.close()
