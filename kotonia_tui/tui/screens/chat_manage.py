"""The chat screen's actions on the conversation itself: branch it at a message, play it as
another persona, rename and export it, and bring back a message deleted this session."""

from __future__ import annotations

from kotonia_tui.chat.managing import conversation_title
from kotonia_tui.domain import StoredConversation
from kotonia_tui.tui.literal import notify
from kotonia_tui.tui.screens.chat_base import ChatParts
from kotonia_tui.tui.screens.conversations import export_conversation, rename_conversation
from kotonia_tui.tui.screens.dialogs import ConfirmScreen
from kotonia_tui.tui.screens.personas import PersonasScreen, persona_change_note
from kotonia_tui.tui.widgets.chat_input import ChatInput


class ConversationActions(ChatParts):
    """Mixed into ChatScreen: branch, persona, rename, export, undo a delete."""

    async def on_chat_input_undo_delete(self, event: ChatInput.UndoDelete) -> None:
        event.stop()
        service = self.service
        if self.streaming or service is None or not service.can_undo_delete(self.conv_id):
            event.box.undo_typing()  # nothing deleted to bring back: the box's own undo
            return
        await self.action_undo_delete()

    async def action_undo_delete(self) -> None:
        service = self._live_service()
        if service is None:
            return
        try:
            restored = service.undo_delete_message(self.conv_id)
        except Exception as exc:
            notify(self, str(exc), title="Not brought back", severity="error")
            return
        if restored is None:
            notify(self, "There is no deleted message to bring back.")
            return
        await self._reload()
        view = self._view_of(restored.id)
        if view is not None:
            self.query_one("#log").scroll_to_widget(view, animate=False)
        notify(self, f"Message {view.label} is back." if view else "The message is back.")
        self.refresh_memory()

    # ---- the conversation: branch, persona, rename, export ----------------------------------

    def action_branch(self) -> None:
        """A new conversation with the messages up to the selected one (or the last) and the
        memory covering them; it opens in place of this one."""
        view = self._target()
        manager = self.kotonia.manager
        if view is None or view.message is None or manager is None:
            return
        try:
            branched = manager.branch(self.conv_id, view.message.id)
        except Exception as exc:
            notify(self, str(exc), title="Not branched", severity="error")
            return
        shared = f"Message {view.label}" if view.number == 1 else f"Messages #1 to {view.label}"
        if branched.chapters or branched.synopses:
            shared += (
                " and their memory, as it was (the next reply reuses the prompt's start)"
                if branched.memory_shared
                else " and the chapters that cover them (applied on its next reply)"
            )
        notify(
            self,
            f"{conversation_title(branched.conversation)}: {shared}. The original stays as it "
            "was (Ctrl+B lists both).",
            title="Branched",
            timeout=10,
        )
        if self.turn is not None:
            self.turn.interrupt("the chat was closed")
        self._open_instead(branched.conversation)

    def action_persona(self) -> None:
        manager = self.kotonia.manager
        if manager is None:
            return
        current = self.conversation.persona_id

        def chosen(persona_id: int | None) -> None:
            if persona_id is None or persona_id == current or manager is None:
                return
            persona = manager.personas.get(persona_id)

            def confirmed(yes: bool | None) -> None:
                if not yes or manager is None:
                    return
                try:
                    self.conversation = manager.set_persona(self.conv_id, persona.id)
                except Exception as exc:
                    notify(self, str(exc), title="Not changed", severity="error")
                    return
                self._show_sub_title()
                notify(self, f"You play {persona.name} in this conversation from now on.")
                self.refresh_memory()

            self.app.push_screen(ConfirmScreen(persona_change_note(persona.name)), confirmed)

        self.app.push_screen(PersonasScreen("this conversation", current), chosen)

    def action_rename(self) -> None:
        manager = self.kotonia.manager
        if manager is None:
            return

        def renamed(conv: StoredConversation) -> None:
            self.conversation = conv
            self._show_sub_title()

        rename_conversation(self, manager, self.conversation, renamed)

    def action_export(self) -> None:
        manager = self.kotonia.manager
        if manager is not None:
            export_conversation(self, manager, self.conversation)
