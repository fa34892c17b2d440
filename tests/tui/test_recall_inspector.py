"""The inspector's recall section: what the last turn quoted from the archive, and why."""

from __future__ import annotations

from kotonia_tui.domain import Message, Role
from kotonia_tui.tui.app import KotoniaApp
from kotonia_tui.tui.widgets.inspector import InspectorPane
from kotonia_tui.tui.widgets.inspector_sections import recall_content
from tests.tui.conftest import tiny_settings
from tests.tui.helpers import open_new_chat, send
from tests.tui.screen_text import screen_text


async def test_the_inspector_lists_the_recalled_messages_and_the_words_they_matched(
    tiny_model_path, mira_card
) -> None:
    # The tiny tokenizer spends a token per byte: a quarter of the window for recall.
    settings = tiny_settings(tiny_model_path, reply_max_tokens=16, recall_budget_ratio=0.25)
    app = KotoniaApp(settings)
    async with app.run_test(size=(120, 40)) as pilot:
        chat = await open_new_chat(app, pilot)
        service = app.service
        assert service is not None
        name = service.persona.name
        archive = [
            Message(role=Role.USER, speaker=name, text="My sister's name is Ilse."),
            Message(role=Role.CHARACTER, speaker="Mira", text="Ilse. A good name."),
        ]
        for number in range(40):
            role = Role.USER if number % 2 == 0 else Role.CHARACTER
            speaker = name if role is Role.USER else "Mira"
            # The verbatim ten say other words than the archive's thirty.
            text = f"Wave {number} broke." if number >= 30 else f"Gull {number} cried."
            archive.append(Message(role=role, speaker=speaker, text=text))
        ids = service.store.add_messages(chat.conv_id, archive)
        # As after a fold: only the newest ten messages are verbatim.
        state = service.store.memory_state(chat.conv_id)
        service.store.set_memory_state(state.model_copy(update={"verbatim_start_id": ids[-10]}))

        await send(pilot, chat, "What was my sister's name?")
        await pilot.press("f2")
        await pilot.pause(0.3)
        view = chat.query_one(InspectorPane).view
        assert view is not None and view.recall is not None
        # The fact, the reply that names it again, and the line after that reply (recall
        # brings the message after each hit).
        assert view.recall.message_ids == ids[:3]
        total, by, found, quoted = recall_content(view).plain.splitlines()
        assert total.endswith(f"of {int(2048 * 0.25):,} tokens · 1 excerpt")
        assert by == "matches by words (semantic_recall = false)"  # tests/conftest.py
        # The greeting is message #1: the archive's first three are #2 to #4.
        assert found.startswith("✓ Messages #2-#4 on ")
        assert "'sister'" in found and "'name'" in found
        assert quoted == f"  {name}: My sister's name is Ilse."
        inspector = chat.query_one(InspectorPane)
        inspector.scroll_to_widget(inspector.query_one("#recall"), animate=False, top=True)
        await pilot.pause()
        shown = screen_text(app)
        assert "Recalled (last turn)" in shown and "✓ Messages #2-#4" in shown
