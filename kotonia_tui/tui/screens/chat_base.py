"""What the chat screen's parts share: the conversation and its service, the message views,
the turn in progress, and what the player can ask for.

The chat screen is made of parts, each in its own module and mixed into `ChatScreen`
(chat.py): the turns and their streaming (chat_turns.py), group chats (chat_group.py), quick
replies (chat_quick.py), versions, selection and edits (chat_messages.py), the expression
pictures (chat_expressions.py), the memory inspector (chat_inspector.py) and the conversation
itself (chat_manage.py). What one part calls in another is declared here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from enum import StrEnum

from textual.containers import VerticalScroll
from textual.worker import Worker

from kotonia_tui.chat.groups import GroupRun
from kotonia_tui.chat.reader import ConversationReader
from kotonia_tui.chat.service import ChatService
from kotonia_tui.chat.turn import Turn
from kotonia_tui.domain import StoredConversation
from kotonia_tui.tui.literal import notify
from kotonia_tui.tui.screens.base import KotoniaScreen
from kotonia_tui.tui.widgets.message_view import MessageView


class Ask(StrEnum):
    """What the player asked for, and so which service call starts the turn."""

    SEND = "send"  # a new message
    ANSWER = "answer"  # a reply to the user's last message, which has none
    REGENERATE = "regenerate"
    CONTINUE = "continue"
    PICK = "pick"  # a group member the player picked answers (manual order, or any time)
    AUTO = "auto"  # the group's cast goes on by itself for AUTO_REPLIES replies


AUTO_REPLIES = 3

WAITING = "waiting for the memory to fold…"
STOPPING = "stopping…"  # Esc was pressed; the reply ends after the current batch or token


class ChatParts(KotoniaScreen[None]):
    """The base of the chat screen's parts; ChatScreen sets what is declared here."""

    conversation: StoredConversation
    conv_id: int
    reader: ConversationReader
    service: ChatService | None
    unavailable: str
    turn: Turn | None
    run: GroupRun | None
    _run_turns: AsyncIterator[Turn] | None
    selected: MessageView | None
    attachments: list[tuple[str, str]]  # (digest, file name)
    _at_end: bool
    streaming: bool
    fold_waiting: bool
    turns_ended: int
    runs_ended: int

    # ---- the message views -----------------------------------------------------------------

    def _views(self) -> list[MessageView]:
        return list(self.query_one("#log", VerticalScroll).query_children(MessageView))

    def _view_of(self, message_id: int | None) -> MessageView | None:
        for view in self._views():
            if view.message_id == message_id:
                return view
        return None

    def _target(self) -> MessageView | None:
        """The selected message, or the last one."""
        if self.selected is not None and self.selected.is_attached:
            return self.selected
        views = self._views()
        return views[-1] if views else None

    def _next_number(self) -> int:
        views = self._views()
        last = views[-1].number if views else None
        return (last or 0) + 1

    def _remove_empty_note(self) -> None:
        for note in self.query("#log-empty"):
            note.remove()

    # ---- shared helpers --------------------------------------------------------------------

    def _live_service(self) -> ChatService | None:
        """The chat service, or None after saying why there is none (read only)."""
        if self.service is None:
            notify(self, self.unavailable, title="Read only", severity="warning", timeout=10)
        return self.service

    def _key_for(self, action: str) -> str:
        """The key bound to `action` as the footer shows it (after a remap in the settings)."""
        for bindings in self._bindings.key_to_bindings.values():
            for binding in bindings:
                if binding.action == action:
                    return self.app.get_key_display(binding)
        return ""

    # ---- provided by other parts (declared for the type checker) ---------------------------

    def run_turn(self, ask: Ask, text: str = "") -> Worker[None]:
        raise NotImplementedError  # chat_turns.py

    def show_expression(self) -> Worker[None]:
        raise NotImplementedError  # chat_expressions.py

    def load_expressions(self) -> Worker[None]:
        raise NotImplementedError  # chat_expressions.py

    def refresh_memory(self) -> None:
        raise NotImplementedError  # chat_inspector.py

    def _select(self, view: MessageView | None) -> None:
        raise NotImplementedError  # chat_messages.py

    async def _reload(self) -> None:
        raise NotImplementedError  # chat.py

    def _set_attachments(self, attachments: list[tuple[str, str]]) -> None:
        raise NotImplementedError  # chat.py

    def _show_sub_title(self) -> None:
        raise NotImplementedError  # chat.py

    def _open_instead(self, conv: StoredConversation) -> None:
        """Show `conv` in place of this conversation."""
        raise NotImplementedError  # chat.py
