"""The chat screen's memory inspector: shown and hidden (F2), refreshed as folds land, and the
pages it opens (a chapter with its source, a ledger entry with its evidence, the synopsis's
versions, the memory by speaker)."""

from __future__ import annotations

import logging

from kotonia_tui.chat.events import FoldProgress, FoldState, FoldWait, ServiceEvent
from kotonia_tui.tui.literal import notify
from kotonia_tui.tui.screens.cast_memory import cast_memory_page
from kotonia_tui.tui.screens.chat_base import WAITING, ChatParts
from kotonia_tui.tui.screens.dialogs import chapter_page, ledger_page, synopsis_page
from kotonia_tui.tui.widgets.chat_input import ChatInput
from kotonia_tui.tui.widgets.inspector import InspectorPane

log = logging.getLogger(__name__)


class InspectorActions(ChatParts):
    """Mixed into ChatScreen: the inspector pane beside the chat."""

    def action_toggle_inspector(self) -> None:
        inspector = self.query_one(InspectorPane)
        # Focus inside a pane that is hidden would go nowhere: what is typed next is lost.
        focus_was_inside = (
            self.focused is not None and inspector in self.focused.ancestors_with_self
        )
        inspector.display = not inspector.display
        self.kotonia.inspector_open = inspector.display
        if inspector.display:
            self.refresh_memory()
        elif focus_was_inside:
            self.query_one(ChatInput).focus()

    def refresh_memory(self) -> None:
        if not self.is_attached or not self.is_mounted:
            return
        found = self.query(InspectorPane)
        inspector = found.first() if found else None
        if inspector is None or not inspector.display:
            return
        if self.service is None:
            inspector.show_unavailable(self.unavailable)
            return
        try:
            view = self.service.memory_view(self.conv_id)
        except Exception as exc:
            log.exception("memory view failed")
            notify(self, str(exc), title="Memory inspector", severity="error")
            return
        inspector.show(view)

    def _tick(self) -> None:
        found = self.query(InspectorPane)
        inspector = found.first() if found else None
        if inspector is not None and inspector.display and self.service is not None:
            inspector.tick(self.service.worker.running)

    def on_service_event(self, event: ServiceEvent) -> None:
        """Called by the app for each fold event or memory notice."""
        if event.conversation_id != self.conv_id:
            return
        if isinstance(event, FoldWait):
            self.fold_waiting = not event.done
            # Events arrive as messages: one can come after the reply began to stream.
            waiting = self.kotonia.turn_status.startswith(WAITING)
            if event.done:
                if waiting:
                    self.kotonia.turn_status = "preparing the prompt…"
            elif waiting or self.kotonia.turn_status == "preparing the prompt…":
                # What the turn waits for is the notice; how far it got, and the way out, here.
                got = f" {event.progress}" if event.progress else ""
                key = self._key_for("go_on")
                self.kotonia.turn_status = f"{WAITING}{got} ({key}: go on without it)"
            if event.progress:
                return  # the inspector shows the fold when it lands
        if isinstance(event, FoldProgress) and event.state is FoldState.RUNNING and self.streaming:
            return  # the fold waits for the turn; the inspector refreshes when the turn ends
        self.refresh_memory()

    def on_inspector_pane_open_chapter(self, event: InspectorPane.OpenChapter) -> None:
        inspector = self.query_one(InspectorPane)
        view = inspector.view
        found = next(
            (c for c in (view.chapters if view else []) if c.chapter.id == event.chapter_id), None
        )
        if found is None or view is None or self.service is None:
            return
        try:
            source = self.service.chapter_source(event.chapter_id)
        except Exception as exc:
            notify(self, str(exc), title="Chapter source", severity="error")
            return
        first = source[0].id if source else None
        numbers = self.reader.message_numbers(self.conv_id, [first]) if first else {}
        self.app.push_screen(
            chapter_page(found.chapter, source, found.applied, view, numbers.get(first or 0, 1))
        )

    def on_inspector_pane_open_ledger_entry(self, event: InspectorPane.OpenLedgerEntry) -> None:
        view = self.query_one(InspectorPane).view
        if view is None or self.service is None:
            return
        try:
            evidence = self.service.ledger_evidence(event.entry)
        except Exception as exc:
            notify(self, str(exc), title="Ledger entry", severity="error")
            return
        numbers = self.reader.cited_numbers(self.conv_id, event.entry.evidence)
        self.app.push_screen(ledger_page(event.entry, evidence, numbers, view))

    def on_inspector_pane_open_synopsis_versions(
        self, event: InspectorPane.OpenSynopsisVersions
    ) -> None:
        inspector = self.query_one(InspectorPane)
        view = inspector.view
        if view is not None:
            self.app.push_screen(synopsis_page(view.synopsis_versions, view))

    def on_inspector_pane_open_cast_memory(self, event: InspectorPane.OpenCastMemory) -> None:
        event.stop()
        self.action_cast_memory()

    def action_cast_memory(self) -> None:
        """What the memory holds of each cast member and the player (Alt+W)."""
        service = self._live_service()
        if service is None:
            return
        try:
            memory = service.groups.memory(self.conv_id)
        except Exception as exc:
            notify(self, str(exc), title="Memory by speaker", severity="error")
            return
        ids = sorted(
            {i for s in memory.speakers for item in (*s.said, *s.about) for i in item.evidence}
        )
        numbers = self.reader.cited_numbers(self.conv_id, ids)
        self.app.push_screen(cast_memory_page(memory, numbers))
