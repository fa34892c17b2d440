"""The chat screen's group actions (issue 31): who speaks next and by which order, the cast
going on by itself, impersonating the player, and members joining, leaving and being muted
mid-story."""

from __future__ import annotations

from collections.abc import Callable

from textual import work
from textual.containers import VerticalScroll

from kotonia_tui.chat.service import ChatService
from kotonia_tui.domain import ReplyOrder
from kotonia_tui.terminal_text import visible
from kotonia_tui.tui.literal import literal_line, notify
from kotonia_tui.tui.screens.chat_base import Ask, ChatParts
from kotonia_tui.tui.screens.choose import ChooseScreen
from kotonia_tui.tui.widgets.chat_input import ChatInput

# The reply orders as the player picks them (SillyTavern's activation strategies).
ORDER_CHOICES: dict[ReplyOrder, str] = {
    ReplyOrder.NATURAL: "natural: whoever the message names first, then the talkative ones",
    ReplyOrder.LIST: "list: every member, in the cast's order",
    ReplyOrder.MANUAL: "manual: nobody until you pick who speaks (Alt+P)",
}


class GroupActions(ChatParts):
    """Mixed into ChatScreen: the group's cast and who answers."""

    impersonated: int

    def action_pick_speaker(self) -> None:
        """The player picks who answers next (a group's manual order, or any time)."""
        service = self._live_service()
        if service is None:
            return
        members = [m for m in service.groups.cast(self.conv_id) if not m.muted]
        if not service.groups.is_group(self.conv_id):
            notify(self, "This chat has one character (Alt+G adds another to make a group).")
            return
        choices = [(m.character_key, m.character_name) for m in members]

        def picked(key: str | None) -> None:
            if key is not None:
                self.run_turn(Ask.PICK, key)

        self.app.push_screen(ChooseScreen("Who speaks next", choices), picked)

    def show_cast(self) -> None:
        """The title names the whole cast (a one-card chat: its character)."""
        names = [m.character_name for m in self.reader.cast(self.conv_id)]
        cast = ", ".join(names or [self.conversation.character_name])
        self.title = visible(cast, one_line=True)
        self.query_one("#log", VerticalScroll).border_title = literal_line(cast)

    def _cast_changed(self) -> None:
        """A member joined or left: the title, the reply order shown, the pictures follow."""
        self.show_cast()
        self._show_sub_title()
        self.load_expressions()

    def action_reply_order(self) -> None:
        """Who answers the player's messages: natural, list or manual order (stored on the
        conversation, as the command line's --order)."""
        service = self._live_service()
        if service is None:
            return
        if not service.groups.is_group(self.conv_id):
            notify(self, "This chat has one character (Alt+G adds another to make a group).")
            return
        current = service.groups.reply_order(self.conv_id)
        choices = [(order.value, label) for order, label in ORDER_CHOICES.items()]

        def picked(value: str | None) -> None:
            if value is None:
                return
            order = ReplyOrder(value)
            try:
                service.groups.set_reply_order(self.conv_id, order)
            except Exception as exc:
                notify(self, str(exc), title="Reply order", severity="error")
                return
            self._show_sub_title()
            notify(self, f"Reply order: {ORDER_CHOICES[order]}.")

        self.app.push_screen(
            ChooseScreen("Who answers your messages", choices, current=current.value), picked
        )

    def action_auto_run(self) -> None:
        service = self._live_service()
        if service is not None and service.groups.is_group(self.conv_id):
            self.run_turn(Ask.AUTO)

    @work(exclusive=True, group="impersonate")
    async def action_impersonate(self) -> None:
        """The model writes the player's next line into the message box (never sent)."""
        service = self._live_service()
        if service is None:
            return
        self.kotonia.turn_status = "writing your line…"
        try:
            line = await service.impersonate(self.conv_id)
        except Exception as exc:
            notify(self, str(exc), title="Impersonate", severity="error")
            return
        finally:
            self.kotonia.turn_status = ""
        chat_input = self.query_one(ChatInput)
        chat_input.clear()
        chat_input.insert(line)
        chat_input.focus()
        self.impersonated += 1

    def action_add_member(self) -> None:
        service = self._live_service()
        if service is None:
            return
        cast = {m.character_key for m in service.groups.cast(self.conv_id)}
        cards = [c for c in service.cards() if c.key not in cast]
        if not cards:
            notify(self, "Every card is in this chat already.")
            return

        def picked(key: str | None) -> None:
            card = next((c for c in cards if c.key == key), None)
            if card is not None:
                service.groups.add_member(self.conv_id, card)
                self._cast_changed()
                notify(self, f"{card.name} joined the chat.")

        choices = [(c.key, c.name) for c in cards]
        self.app.push_screen(ChooseScreen("Add to the group", choices), picked)

    def action_remove_member(self) -> None:
        self._member_action("Take out of the group", self._remove_member)

    def action_mute_member(self) -> None:
        self._member_action("Mute or unmute", self._toggle_mute)

    def _member_action(self, title: str, act: Callable[[ChatService, str], str]) -> None:
        service = self._live_service()
        if service is None:
            return
        if not service.groups.is_group(self.conv_id):
            notify(self, "This chat has one character.")
            return
        members = service.groups.cast(self.conv_id)
        choices = [
            (m.character_key, m.character_name + (" (muted)" if m.muted else "")) for m in members
        ]

        def picked(key: str | None) -> None:
            if key is None:
                return
            try:
                notify(self, act(service, key))
            except Exception as exc:
                notify(self, str(exc), title=title, severity="error")

        self.app.push_screen(ChooseScreen(title, choices), picked)

    def _remove_member(self, service: ChatService, key: str) -> str:
        member = next(m for m in service.groups.cast(self.conv_id) if m.character_key == key)
        service.groups.remove_member(self.conv_id, key)
        self._cast_changed()
        return f"{member.character_name} left the group (their lines stay in the story)."

    def _toggle_mute(self, service: ChatService, key: str) -> str:
        member = next(m for m in service.groups.cast(self.conv_id) if m.character_key == key)
        service.groups.set_muted(self.conv_id, key, not member.muted)
        return f"{member.character_name} is {'unmuted' if member.muted else 'muted'}."
