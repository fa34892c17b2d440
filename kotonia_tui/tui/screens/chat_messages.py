"""The chat screen's actions on one message: its versions (swipes), selecting it, editing,
deleting and copying it."""

from __future__ import annotations

from textual.containers import VerticalScroll

from kotonia_tui.chat.service import ChatService
from kotonia_tui.domain import Role, StoredMessage
from kotonia_tui.tui.literal import notify
from kotonia_tui.tui.screens.chat_base import Ask, ChatParts
from kotonia_tui.tui.screens.dialogs import ConfirmScreen, EditScreen
from kotonia_tui.tui.widgets.chat_input import ChatInput
from kotonia_tui.tui.widgets.message_view import MessageView


class MessageActions(ChatParts):
    """Mixed into ChatScreen: versions, selection, edits."""

    def action_alternative(self, step: int) -> None:
        self._swipe(self._target(), step)

    def on_chat_input_swipe(self, event: ChatInput.Swipe) -> None:
        event.stop()
        if self.streaming:
            return
        views = self._views()
        self._swipe(views[-1] if views else None, event.step)

    def _swipe(self, view: MessageView | None, step: int) -> None:
        """SillyTavern's swipes: ← an older version, → a newer one; → on the newest version of
        the last reply writes another. Older messages page through the versions they have."""
        message = view.message if view is not None else None
        if view is None or message is None or message.role is Role.SYSTEM:
            return
        views = self._views()
        last = bool(views) and view is views[-1]
        count = max(1, len(message.alternatives))
        index = message.chosen + step
        if index < 0:
            notify(self, "This is the first version (→ goes to the newer ones).")
            return
        if index >= count:
            if last and message.role is Role.CHARACTER:
                self.run_turn(Ask.REGENERATE)
            elif message.role is Role.USER:
                notify(self, "Your messages have no versions (F4 edits one).")
            else:
                notify(self, "This is the newest version: only the last reply gets new ones.")
            return
        service = self._live_service()
        if service is None:
            return
        try:
            view.set_message(service.choose_alternative(message.id, index))
        except Exception as exc:
            notify(self, str(exc), severity="error")
            return
        self.refresh_memory()
        self.show_expression()

    def action_select(self, step: int) -> None:
        views = self._views()
        if not views:
            return
        current = self._target()
        index = views.index(current) if current in views else len(views) - 1
        if self.selected is None and step < 0:
            index = len(views)  # the first Alt+Up selects the last message
        index = max(0, min(len(views) - 1, index + step))
        self._select(views[index])

    def _select(self, view: MessageView | None) -> None:
        if self.selected is not None and self.selected.is_attached:
            self.selected.remove_class("-selected")
        self.selected = view
        if view is not None:
            view.add_class("-selected")
            self.query_one("#log", VerticalScroll).scroll_to_widget(view, animate=False)

    def on_click(self, event: object) -> None:
        widget = getattr(event, "widget", None)
        while widget is not None and not isinstance(widget, MessageView):
            widget = widget.parent
        if isinstance(widget, MessageView):
            self._select(None if widget is self.selected else widget)

    def _stored_target(self) -> tuple[MessageView, StoredMessage, ChatService] | None:
        """The message an edit or a delete acts on, stored, with the service that changes it
        (None when there is none, or the chat is read only: said then)."""
        view = self._target()
        if view is None or view.message is None or view.message.id is None:
            return None
        service = self._live_service()
        return None if service is None else (view, view.message, service)

    def action_edit(self) -> None:
        target = self._stored_target()
        if target is None:
            return
        view, message, service = target
        label = view.label

        def done(text: str | None) -> None:
            if text is None or text == message.text:
                return
            try:
                view.set_message(service.edit_message(message.id, text))
            except Exception as exc:
                notify(self, str(exc), title="Not edited", severity="error")
                return
            notify(self, f"Message {label} edited.")
            self.refresh_memory()

        self.app.push_screen(EditScreen(message, label), done)

    def action_delete(self) -> None:
        target = self._stored_target()
        if target is None:
            return
        view, message, service = target
        label = view.label

        def done(yes: bool | None) -> None:
            if not yes:
                return
            try:
                service.delete_message(message.id)
            except Exception as exc:
                notify(self, str(exc), title="Not deleted", severity="error")
                return
            if self.selected is view:
                self.selected = None
            views = self._views()
            for later in views[views.index(view) + 1 :]:
                if later.number is not None:
                    later.renumber(later.number - 1)  # numbers are places: the rest move up
            view.remove()
            notify(self, f"Message {label} deleted. Ctrl+Z (on an empty box) brings it back.")
            self.refresh_memory()

        preview = message.text if len(message.text) < 120 else message.text[:119] + "…"
        self.app.push_screen(
            ConfirmScreen(f"Delete message {label} by {message.speaker}?\n\n{preview}"), done
        )

    def action_copy_message(self) -> None:
        view = self._target()
        if view is None or not view.text:
            return
        self.app.copy_to_clipboard(view.text)
        label = view.label if view.message_id else "the reply"
        notify(self, f"Copied {label} to the clipboard.")
