"""The inspector's Ledger repaints when a deletion renumbers what an entry shows.

Its repaint key held only an entry's first evidence number and its chapters' ranges, while
the line shows every evidence number and the entry's numbered text: an entry citing two
messages kept a stale second number after a message between them was deleted; once one of
them is deleted, the line says so in words (chat/numbering.py `evidence_said`). The pane here
is the app's, in an app of its own; the service runs on the fake engine (no model: only the
store and the numbering count).
"""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import Label, ListView

from kotonia_tui.domain import Chapter, LedgerKind, Message, Role
from kotonia_tui.tui.widgets.inspector import InspectorPane, LedgerItem
from tests.cards import write_short_card
from tests.fake_engine import scripted
from tests.scripted_chapters import ledger_entry
from tests.settings import fake_settings


class _Inspector(App[None]):
    def compose(self) -> ComposeResult:
        yield InspectorPane()


def _ledger(pane: InspectorPane) -> list[str]:
    """The Ledger's lines as painted."""
    listing = pane.query_one("#ledger", ListView)
    return [str(item.query_one(Label).render()) for item in listing.query(LedgerItem)]


async def test_a_deletion_between_an_entrys_evidence_repaints_its_line(make_fake_service):
    key = write_short_card()
    service = await make_fake_service(fake_settings(), scripted("Aye."))
    store = service.store
    conv = service.new_conversation(service.library.get(key))  # the greeting is message 1
    user = service.persona.name
    said = [Message(role=Role.USER, speaker=user, text=f"Line {i}.") for i in range(2, 8)]
    assert store.add_messages(conv.id, said) == [2, 3, 4, 5, 6, 7]
    # A chapter of #1-#3 writes an entry resting on #2 and on #6, past the chapter.
    store.store_chapter(
        Chapter(conversation_id=conv.id, first_message_id=1, last_message_id=3, text="- Met."),
        [ledger_entry(conv.id, LedgerKind.PROMISE, "Wren lights the lamp (#2 #6)", 2, 6)],
    )
    app = _Inspector()
    async with app.run_test(size=(120, 60)) as pilot:
        pane = app.query_one(InspectorPane)
        pane.show(service.memory_view(conv.id))
        await pilot.pause()
        (before,) = _ledger(pane)
        assert "· #2 #6 · from #1-#3" in before and "Wren lights the lamp (#2 #6)" in before

        # Message #4 goes: nothing the old key held changes (#2, the chapter's #1-#3), but the
        # second evidence number and the text's do.
        service.delete_message(4)
        pane.show(service.memory_view(conv.id))
        await pilot.pause()
        (after,) = _ledger(pane)
        assert "· #2 #5 · from #1-#3" in after and "Wren lights the lamp (#2 #5)" in after
        assert "#6" not in after

        # The entry's second message goes (#5 now): the line says so in words, repainted (its
        # key is the line as read), never as the number of the message before it ("#2 #4").
        service.delete_message(6)
        pane.show(service.memory_view(conv.id))
        await pilot.pause()
        (gone,) = _ledger(pane)
        assert "· #2 and a deleted message · from #1-#3" in gone
        assert "#2 #4" not in gone
