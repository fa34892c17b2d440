"""In the app, a turn waiting for a fold says how far the fold got and how to go on without it
(issue 14): the key is in the status line and the footer while the wait lasts, and it works.
Real app, engine (a scripted tiny GGUF) and store; the fold is slowed by holding the engine's
owner thread between its steps (`Load`)."""

from __future__ import annotations

import threading
import time

from kotonia_tui.chat.events import FoldWait
from kotonia_tui.chat.service import ChatService
from kotonia_tui.domain import FoldJob, FoldKind, Message, Role, utcnow
from kotonia_tui.engine import Priority, Slot
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.widgets.chat_input import ChatInput
from tests.chat.test_folding import CHAPTER
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import open_new_chat, wait_for
from tests.tui.screen_text import screen_text

SIZE = (120, 40)


class Load:
    """Holds the engine's owner thread for `hold_s` at a time, from a thread of its own, with
    at least one step of the fold in between."""

    def __init__(self, service: ChatService, hold_s: float) -> None:
        self.engine = service.engine
        self.hold_s = hold_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _hold(self) -> None:
        owner = self.engine._owner  # type: ignore[attr-defined]
        owner.call(lambda: time.sleep(self.hold_s), priority=int(Priority.INTERACTIVE)).result()

    def _run(self) -> None:
        self._hold()
        while not self._stop.is_set():
            seen = self.engine.work(Slot.FOLD)
            while self.engine.work(Slot.FOLD) == seen and not self._stop.is_set():
                time.sleep(0.001)  # until the fold took a step
            self._hold()


async def test_the_key_to_go_on_without_the_fold_is_shown_and_works(scripted_model, mira_card):
    settings = tiny_settings(
        scripted_model(CHAPTER),
        reply_max_tokens=32,
        fold_delay_s=3600,  # the chapter job waits until a turn needs it
        fold_wait_s=600,  # only the key ends this wait
        fold_quote_first=False,  # the turn waits for the chronicler (quote first: it never does)
        prewarm_after_fold=False,
    )
    app = KotoniaApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        service = app.service
        assert service is not None
        store = service.store
        # A history past the ceiling, and the chapter job for its oldest part still queued.
        ids = store.add_messages(
            screen.conv_id,
            [
                Message(
                    role=Role.USER if i % 2 == 0 else Role.CHARACTER,
                    speaker="User" if i % 2 == 0 else "Mira",
                    text=f"Line {i}: the storm, the lamps and the long night at the lighthouse.",
                )
                for i in range(120)
            ],
        )
        store.enqueue_fold(
            FoldJob(
                conversation_id=screen.conv_id,
                kind=FoldKind.CHAPTER,
                first_message_id=ids[0],
                last_message_id=ids[30],
                not_before=utcnow().replace(year=utcnow().year + 1),
            )
        )
        await screen._reload()
        waits: list[FoldWait] = []
        service.subscribe(lambda e: waits.append(e) if isinstance(e, FoldWait) else None)
        load = Load(service, hold_s=0.3)
        load.start()
        try:
            ended = screen.turns_ended
            screen.query_one(ChatInput).insert("Is the lamp still lit?")
            await pilot.press("enter")
            await wait_for(pilot, lambda: "go on without it" in screen_text(app), timeout=60)
            text = screen_text(app)
            assert "waiting for the memory to fold…" in text
            assert "^o: go on without it" in text  # the status line names the key
            assert "Go on without memory" in text  # and the footer shows it
            await pilot.press("ctrl+o")
            # The turn goes on at once: the status line says what left the prompt.
            await wait_for(pilot, lambda: "left the prompt" in screen_text(app))
        finally:
            load.stop()
        await wait_for(pilot, lambda: screen.turns_ended > ended and not screen.streaming, 120)
        await pilot.pause()
        assert "Go on without memory" not in screen_text(app)  # only while a turn waits
        last = store.last_message(screen.conv_id)
        assert last is not None and last.role is Role.CHARACTER and last.text
        assert store.memory_state(screen.conv_id).forced_cuts == 1
        assert waits[-1].done and "going on without it, as asked" in waits[-1].text
