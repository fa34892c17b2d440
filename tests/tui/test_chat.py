"""Pilot tests of the whole app on the tiny real models (no mocks of the engine)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest
from textual.widgets import DataTable, ListView, TextArea

from kotonia_tui.chat.bootstrap import open_store
from kotonia_tui.chat.errors import ChatError
from kotonia_tui.config import app_dirs
from kotonia_tui.domain import (
    Chapter,
    LedgerEnd,
    LedgerEnding,
    LedgerKind,
    MessageStatus,
    Role,
)
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.screens.chat import ChatScreen
from kotonia_tui.tui.screens.conversations import ConversationsScreen
from kotonia_tui.tui.screens.dialogs import EditScreen, HelpScreen
from kotonia_tui.tui.widgets.chat_input import ChatInput
from kotonia_tui.tui.widgets.inspector import ChapterItem, InspectorPane, LedgerItem
from kotonia_tui.tui.widgets.message_view import MessageView
from tests.scripted_chapters import ledger_entry
from tests.tiny_models import write_tiny_png
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import (
    attach,
    open_listed,
    open_new_chat,
    run_key,
    search_palette,
    send,
    views,
    wait_for,
)
from tests.tui.screen_text import screen_text

SIZE = (120, 40)
# A chapter job as the status line and the fold queue name it: "chapter #1-#9".
FOLD_JOB = re.compile(r"chapter #\d+-#\d+")


async def test_pick_a_character_send_and_see_the_streamed_reply(tiny_noeos_model_path, mira_card):
    app = KotoniaApp(tiny_settings(tiny_noeos_model_path, reply_max_tokens=1200))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        assert [v.role for v in views(screen)] == [Role.CHARACTER]  # the greeting
        assert "You made it through the storm, User." in screen_text(app)

        painted: list[int] = []
        original = MessageView._paint_body

        def spy(view: MessageView) -> None:
            original(view)
            if view.streaming:
                painted.append(len(view.text))

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(MessageView, "_paint_body", spy)
            await send(pilot, screen, "Hello, Mira.")

        user, reply = views(screen)[-2:]
        assert user.role is Role.USER and user.text == "Hello, Mira."
        assert reply.message is not None and reply.message.id is not None
        assert reply.text  # random words from the tiny model
        assert len(set(painted)) > 2  # repainted as it grew, token by token
        assert screen.query_one("#input", ChatInput).text == ""  # sent, so the box is empty


async def _press_while_streaming(app: KotoniaApp, pilot, screen: ChatScreen, key: str) -> None:
    """Send a message; `key` goes into the app's key queue the moment the reply shows its first
    words: pilot.press("enter") waits for the app to be idle, and by then a fast tiny model may
    have finished the whole reply."""
    pressed: list[int] = []
    original = MessageView._paint_body

    def press_while_streaming(view: MessageView) -> None:
        original(view)
        if view.streaming and len(view.text) > 5 and not pressed:
            pressed.append(len(view.text))
            app.simulate_key(key)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MessageView, "_paint_body", press_while_streaming)
        screen.query_one("#input", ChatInput).insert("Tell me a very long story.")
        await pilot.press("enter")
        await wait_for(pilot, lambda: bool(pressed))


async def test_escape_cancels_a_streaming_reply(tiny_noeos_model_path, mira_card):
    app = KotoniaApp(tiny_settings(tiny_noeos_model_path, reply_max_tokens=1600))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        await _press_while_streaming(app, pilot, screen, "escape")
        await wait_for(pilot, lambda: not screen.streaming)
        await pilot.pause()
        reply = views(screen)[-1]
        assert reply.message is not None
        assert reply.message.status is MessageStatus.CANCELLED
        assert "stopped: stopped by the user" in screen_text(app)


async def test_closing_the_chat_mid_reply_stores_what_was_written(tiny_noeos_model_path, mira_card):
    app = KotoniaApp(tiny_settings(tiny_noeos_model_path, reply_max_tokens=1600))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        await _press_while_streaming(app, pilot, screen, "ctrl+b")
        await wait_for(pilot, lambda: app.screen is not screen)
        service = app.service
        assert service is not None
        # The turn is the service's: it stops and stores its reply without the screen.
        await wait_for(
            pilot, lambda: service.store.last_message(screen.conv_id).role is Role.CHARACTER
        )
        reply = service.store.last_message(screen.conv_id)
        assert reply.text
        assert reply.status is MessageStatus.CANCELLED
        assert reply.status_reason == "stopped: the chat was closed"
        assert service.store.last_turn_metrics(screen.conv_id).generated < 1600


async def test_quitting_mid_reply_stores_what_was_written(tiny_noeos_model_path, mira_card):
    app = KotoniaApp(tiny_settings(tiny_noeos_model_path, reply_max_tokens=1600))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        conv_id = screen.conv_id
        await _press_while_streaming(app, pilot, screen, "ctrl+q")
    # The app has quit and closed the database; a new store sees the stopped reply.
    with open_store(app.settings) as store:
        reply = store.last_message(conv_id)
        assert reply.role is Role.CHARACTER and reply.text
        assert reply.status is MessageStatus.CANCELLED
        assert reply.status_reason == "stopped: the app was closed"


async def measure_stall(
    app: KotoniaApp, pilot, text: str, key: str = "mira"
) -> tuple[float, MessageView]:
    """Send `text`; the largest delay of a 5 ms asyncio sleep while the reply streams, in ms."""
    screen = await open_new_chat(app, pilot, key)
    stalls: list[float] = [0.0]

    async def probe() -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(0.005)
            stalls.append(time.perf_counter() - start - 0.005)

    task = asyncio.create_task(probe())
    try:
        await send(pilot, screen, text)
    finally:
        task.cancel()
    return max(stalls) * 1000, views(screen)[-1]


async def test_event_loop_stays_responsive_while_a_reply_streams(
    tiny_noeos_model_path, mira_card, capsys
):
    """Worst case: the tiny model streams ~2,000 tokens/s, so the engine thread's Python
    sampling loop holds the GIL most of the time; the UI must still get through."""
    app = KotoniaApp(tiny_settings(tiny_noeos_model_path, reply_max_tokens=1600))
    async with app.run_test(size=SIZE) as pilot:
        worst_ms, reply = await measure_stall(app, pilot, "Tell me a very long story.")
        assert reply.message is not None and reply.message.status is MessageStatus.CUT
        with capsys.disabled():
            print(f"\nlargest event-loop stall, tiny model, 1600 tokens: {worst_ms:.0f} ms")
        assert worst_ms < 1500


@pytest.mark.default_model
@pytest.mark.slow
async def test_event_loop_stall_on_the_default_model(capsys):
    """The embedded default model (Gemma 3 270M) at its real speed, with Rowan's long card."""
    from kotonia_tui.config import load_settings

    app = KotoniaApp(load_settings(fold_delay_s=3600))
    async with app.run_test(size=SIZE) as pilot:
        worst_ms, reply = await measure_stall(
            app, pilot, "Good evening, Rowan. What are you working on tonight?", "rowan-ashby"
        )
        assert reply.message is not None
        with capsys.disabled():
            print(
                f"\nlargest event-loop stall, default model, {len(reply.text)} chars: "
                f"{worst_ms:.0f} ms"
            )
        assert worst_ms < 1000  # a shared 2-core machine; typical runs: 150-600 ms


async def test_regenerate_keeps_versions_to_page_through(tiny_model_path, mira_card):
    app = KotoniaApp(tiny_settings(tiny_model_path))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        await send(pilot, screen, "Hello.")
        first = views(screen)[-1].text
        await run_key(pilot, screen, "ctrl+r")
        reply = views(screen)[-1]
        assert reply.message is not None
        assert len(reply.message.alternatives) == 2 and reply.message.chosen == 1
        assert "‹ 2/2 ›" in screen_text(app)
        await pilot.press("alt+left")
        await pilot.pause()
        assert views(screen)[-1].message.chosen == 0
        assert views(screen)[-1].text == first
        assert "‹ 1/2 ›" in screen_text(app)
        await pilot.press("alt+right")
        await pilot.pause()
        assert views(screen)[-1].message.chosen == 1


async def test_continue_edit_copy_and_delete(tiny_model_path, mira_card):
    app = KotoniaApp(tiny_settings(tiny_model_path, reply_max_tokens=32))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        await send(pilot, screen, "Hello.")
        before = views(screen)[-1].text
        await run_key(pilot, screen, "ctrl+g")
        assert views(screen)[-1].text.startswith(before.strip()[:10])

        await pilot.press("f4")
        await wait_for(pilot, lambda: isinstance(app.screen, EditScreen))
        editor = app.screen.query_one("#edit-text", TextArea)
        editor.text = '*Mira smiles.* "Edited."'
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.screen is screen)
        await pilot.pause()
        assert views(screen)[-1].text == '*Mira smiles.* "Edited."'
        # Shown as written, styled in place: the action's asterisks are markup, the quotes stay,
        # and the speaker's name is in the header only.
        assert 'Mira smiles. "Edited."' in screen_text(app)
        assert "Mira: Edited." not in screen_text(app)

        await pilot.press("alt+c")
        await pilot.pause()
        assert app.clipboard == '*Mira smiles.* "Edited."'

        count = len(views(screen))
        await pilot.press("f8")
        await pilot.press("y")
        await pilot.pause()
        assert len(views(screen)) == count - 1
        assert app.service is not None
        stored = app.service.messages(screen.conv_id)
        assert [m.text for m in stored][-1] == "Hello."


async def test_a_failed_send_keeps_the_typed_message(tiny_model_path, mira_card):
    app = KotoniaApp(tiny_settings(tiny_model_path))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)

        async def broken_send(*args, **kwargs):
            raise ChatError("the model is on fire")

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(screen.service, "send", broken_send)
            screen.query_one("#input", ChatInput).insert("Do not lose me.")
            await pilot.press("enter")
            await pilot.pause(0.2)
        assert screen.query_one("#input", ChatInput).text == "Do not lose me."
        assert any("the model is on fire" in str(n.message) for n in app._notifications)


async def test_attach_an_image(tiny_model_path, tiny_mmproj_path, mira_card, tmp_path):
    png = write_tiny_png(tmp_path / "pictures" / "sunset.png")
    app = KotoniaApp(tiny_settings(tiny_model_path, mmproj_path=tiny_mmproj_path))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        await attach(pilot, screen, png)
        assert "sunset.png" in screen_text(app)
        await send(pilot, screen, "What do you see?")
        user = views(screen)[-2]
        assert user.message is not None and len(user.message.images) == 1
        assert "1 image attached" in screen_text(app)
        assert not screen.attachments


async def test_inspector_shows_the_fold_and_a_chapter(tiny_model_path, mira_card):
    app = KotoniaApp(tiny_settings(tiny_model_path, summary_max_tokens=64))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        await pilot.press("f2")
        await pilot.pause()
        inspector = screen.query_one(InspectorPane)
        assert inspector.display
        assert "Next prompt" in screen_text(app)
        for n in range(4):
            await send(pilot, screen, f"Turn {n}: the storm is getting worse, Mira.")
        service = app.service
        assert service is not None
        # The history crossed the fold trigger: a fold job was queued and the worker ran it,
        # named by the range it folds (the status line, the fold queue), not by its store id.
        # (Its first chapter may queue the rest of the range as a second job before this looks.)
        await wait_for(pilot, lambda: bool(FOLD_JOB.search(screen_text(app))), timeout=20)
        assert inspector.view is not None and inspector.view.last_metrics is not None
        assert "prompt positions" in screen_text(app)

        # A 64-token output budget cannot hold a structured chapter: the range lands as a
        # chapter quoted from its own lines, and says why.
        await wait_for(pilot, lambda: bool(list(inspector.query(ChapterItem))), timeout=60)
        items = list(inspector.query(ChapterItem))
        # The oldest chapter (listed last): its range begins with the greeting.
        index, chapter = max(enumerate(i.chapter_view.chapter for i in items))
        assert chapter.first_message_id == 1
        assert chapter.quoted and "cannot hold the smallest structured chapter" in chapter.note
        assert "quoted" in screen_text(app) and "next turn" in screen_text(app)
        page = await open_listed(pilot, app, inspector.query_one("#chapters", ListView), index)
        assert "quoted from messages" in page and "Source messages" in page
        assert "You made it through the storm" in page  # message #1, the greeting
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen)

        # The Ledger section: a chapter's entries with their evidence and validity (written
        # through the store, as above); one resolved by a later chapter stays listed, dimmed.
        opener = service.store.store_chapter(
            Chapter(
                conversation_id=screen.conv_id, first_message_id=4, last_message_id=4, text="x"
            ),
            [
                ledger_entry(
                    screen.conv_id, LedgerKind.THREAD, "Whether the lamp survives the storm", 1
                ),
                ledger_entry(
                    screen.conv_id,
                    LedgerKind.USER_FACT,
                    "User keeps a lighthouse log",
                    2,
                    subject="User",
                ),
            ],
        )
        thread = next(
            e for e in service.store.ledger(screen.conv_id) if e.kind is LedgerKind.THREAD
        )
        service.store.store_chapter(
            Chapter(
                conversation_id=screen.conv_id, first_message_id=5, last_message_id=5, text="y"
            ),
            [],
            [LedgerEnding(thread.id, LedgerEnd.RESOLVED, "it did")],
        )
        screen.refresh_memory()
        await pilot.pause()
        inspector.scroll_end(animate=False)  # the Ledger is the pane's last section
        await pilot.pause()
        text = screen_text(app)
        assert "Ledger" in text and "User keeps a lighthouse log" in text
        # Its chapters by their ranges, as the chat numbers messages (not by store id).
        assert "from #4-#4" in text
        assert "#4-#4 to #5-#5, resolved" in text
        ledger = inspector.query_one("#ledger", ListView)
        # (The quoted chapters above may have put the user's own lines in the ledger too.)
        entries = [i.entry for i in ledger.query(LedgerItem)]
        written = [e for e in entries if e.chapter_id == opener.id]
        assert [e.kind for e in written] == [LedgerKind.USER_FACT, LedgerKind.THREAD]
        page = await open_listed(pilot, app, ledger, entries.index(written[1]))
        assert "Whether the lamp survives the storm" in page and "Evidence" in page
        assert "valid from #4-#4 to #5-#5 · resolved" in page
        assert "resolved: it did" in page
        assert "You made it through the storm" in page  # the evidence: message #1


async def test_help_keymap_palette_and_theme(tiny_eos_model_path, mira_card):
    settings = tiny_settings(tiny_eos_model_path, keys={"inspector": "f9"})
    app = KotoniaApp(settings)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        await pilot.press("f9")
        await pilot.pause()
        assert screen.query_one(InspectorPane).display  # remapped through settings.keys
        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        # The table is longer than the screen: the cursor on the inspector's row brings it
        # into view, as a user scrolling to it would.
        table = app.screen.query_one("#help-table", DataTable)
        ids = [str(table.get_row_at(i)[2]) for i in range(table.row_count)]
        for row_id in ("inspector", "regenerate"):
            table.move_cursor(row=ids.index(row_id))
            await pilot.pause()
            row = next(line for line in screen_text(app).splitlines() if f" {row_id} " in line)
            assert ("F9" in row) is (row_id == "inspector"), row
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen)

        await search_palette(pilot, "Regenerate")
        assert "Regenerate" in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()

        app.theme = "nord"
        await pilot.pause()
    state = json.loads(Path(app_dirs().state_file).read_text())
    assert state["theme"] == "nord"
    again = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with again.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert again.theme == "nord"


async def test_opening_a_conversation_pushes_the_chat_screen_over_the_listings(
    tiny_eos_model_path, mira_card
):
    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        assert type(screen) is ChatScreen and screen.kotonia is app
        # Back from it is the character's conversations, not an empty app.
        assert isinstance(app.screen_stack[-2], ConversationsScreen)


async def test_fast_typing_then_enter_sends_every_character(tiny_eos_model_path, mira_card):
    """Keys that arrive faster than the box handles them (a fast typist, tmux send-keys, a
    paste) must all land before Enter sends: Enter is handled in order with the typing."""
    from textual import events

    app = KotoniaApp(tiny_settings(tiny_eos_model_path))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        text = "Tell me about the clocks in your shop, please."
        ended = screen.turns_ended
        for character in text:
            key = "space" if character == " " else character
            app.post_message(events.Key(key, character))
        app.post_message(events.Key("enter", "\r"))
        await wait_for(pilot, lambda: screen.turns_ended > ended and not screen.streaming)
        await pilot.pause()
        conv_id = screen.conversation.id
        user = [m for m in app.service.store.recent_messages(conv_id, 5) if m.role is Role.USER]
        assert user[-1].text == text


async def test_hiding_the_inspector_while_it_has_the_focus_gives_it_back_to_the_message_box(
    tiny_model_path, mira_card
):
    """F2, Tab (into the inspector), F2: what the player types next reaches the message box."""
    app = KotoniaApp(tiny_settings(tiny_model_path))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_new_chat(app, pilot)
        await pilot.press("f2")
        await pilot.pause()
        inspector = screen.query_one(InspectorPane)
        for _ in range(6):  # Tab until the focus is inside the inspector
            if screen.focused is not None and inspector in screen.focused.ancestors_with_self:
                break
            await pilot.press("tab")
            await pilot.pause()
        assert screen.focused is not None and inspector in screen.focused.ancestors_with_self
        await pilot.press("f2")
        await pilot.pause()
        assert not inspector.display
        await pilot.press("h", "i")
        assert screen.query_one(ChatInput).text == "hi"
