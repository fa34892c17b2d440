"""The chat screen's quick replies (issue 31): the player's own snippets on Alt+1..9 and in a
list (Alt+Q), each sent at once or put into the message box to edit; Alt+K edits them."""

from __future__ import annotations

from kotonia_tui.tui.literal import notify
from kotonia_tui.tui.screens.chat_base import Ask, ChatParts
from kotonia_tui.tui.screens.choose import ChooseScreen
from kotonia_tui.tui.screens.quick_replies import QuickRepliesScreen
from kotonia_tui.tui.widgets.chat_input import ChatInput


class QuickReplyActions(ChatParts):
    """Mixed into ChatScreen: the quick replies of this conversation's cast."""

    def action_quick_replies(self) -> None:
        service = self._live_service()
        if service is None:
            return
        replies = service.quick_replies(self.conv_id)
        if not replies:
            notify(self, f"No quick replies yet ({self._key_for('edit_quick_replies')} adds one).")
            return
        choices = [(str(i), f"{i}. {q.label}") for i, q in enumerate(replies, start=1)]

        def picked(number: str | None) -> None:
            if number is not None:
                self.action_quick_reply(int(number))

        self.app.push_screen(ChooseScreen("Quick replies", choices), picked)

    def action_quick_reply(self, number: int) -> None:
        """The Nth quick reply: sent, or put into the message box to edit."""
        service = self._live_service()
        if service is None:
            return
        replies = service.quick_replies(self.conv_id)
        if not 1 <= number <= len(replies):
            notify(self, f"There is no quick reply {number} ({len(replies)} set).")
            return
        reply = replies[number - 1]
        if reply.send:
            self.run_turn(Ask.SEND, reply.text)
        else:
            chat_input = self.query_one(ChatInput)
            chat_input.insert(reply.text)
            chat_input.focus()

    def action_edit_quick_replies(self) -> None:
        """Add, edit and delete quick replies (global, or one of the cast's own)."""
        service = self._live_service()
        if service is not None:
            self.app.push_screen(QuickRepliesScreen(service, self.conv_id))
