"""The chat screen: the conversation, the message box, and the memory inspector beside them.

A turn runs in an async worker on the event loop: the engine generates on its own thread and
hands tokens over through asyncio, so this screen only appends text (repainted at most every
50 ms) and the UI stays responsive however long the reply is.

Messages are read through a `ConversationReader`, so a conversation can be opened and read when
the model could not be loaded (`service` is None then, and sending says why it cannot).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.reactive import reactive
from textual.widgets import Button, Footer, Header, Static

from kotonia_tui.characters.card import CardImage
from kotonia_tui.characters.expressions import Expression, expression_for
from kotonia_tui.chat.events import (
    FoldProgress,
    FoldState,
    FoldWait,
    ReplyDelta,
    ServiceEvent,
    TurnDone,
)
from kotonia_tui.chat.groups import GroupRun
from kotonia_tui.chat.reader import ConversationReader
from kotonia_tui.chat.service import ChatService
from kotonia_tui.chat.turn import NO_REPLY, NOTHING_WRITTEN, Turn, TurnKind
from kotonia_tui.domain import MessageStatus, Role, StoredConversation, StoredMessage
from kotonia_tui.terminal_text import visible
from kotonia_tui.tui.literal import literal, literal_line, notify
from kotonia_tui.tui.screens.chat_manage import ConversationActions
from kotonia_tui.tui.screens.chat_settings import ChatSettingsScreen
from kotonia_tui.tui.screens.choose import ChooseScreen
from kotonia_tui.tui.screens.dialogs import (
    AttachScreen,
    ConfirmScreen,
    EditScreen,
    chapter_page,
    ledger_page,
    synopsis_page,
)
from kotonia_tui.tui.widgets.chat_input import ChatInput
from kotonia_tui.tui.widgets.expression import ExpressionPane
from kotonia_tui.tui.widgets.inspector import InspectorPane
from kotonia_tui.tui.widgets.message_view import MessageView
from kotonia_tui.tui.widgets.status import StatusLine

log = logging.getLogger(__name__)

PAGE = 100  # messages loaded at a time


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


class ChatScreen(ConversationActions):
    """One conversation."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Stop reply", id="cancel", priority=True),
        # Shown only while a turn waits for a fold (the message box has the focus: priority).
        Binding("ctrl+o", "go_on", "Go on without memory", id="go_on_without_fold", priority=True),
        Binding("f2", "toggle_inspector", "Memory", id="inspector"),
        Binding("f3", "attach", "Attach", id="attach"),
        Binding("ctrl+r", "regenerate", "Regenerate", id="regenerate"),
        Binding("ctrl+g", "continue_reply", "Continue", id="continue"),
        # ← and → on an empty message box do the same for the last reply (chat_input.py).
        Binding("alt+left", "alternative(-1)", "Older version", id="previous_version", show=False),
        Binding(
            "alt+right",
            "alternative(1)",
            "Next version (new on the last)",
            id="next_version",
            show=False,
        ),
        Binding("alt+up", "select(-1)", "Select earlier message", id="select_previous", show=False),
        Binding("alt+down", "select(1)", "Select next message", id="select_next", show=False),
        Binding("f4", "edit", "Edit", id="edit"),
        Binding("f9", "settings", "Settings", id="chat_settings"),
        Binding("f8", "delete", "Delete", id="delete", show=False),
        # Ctrl+Z in the message box when it is empty (chat_input.py); this one for the palette.
        Binding("ctrl+z", "undo_delete", "Undo delete", id="undo_delete", show=False),
        Binding("ctrl+n", "branch", "Branch", id="branch"),
        Binding("f5", "persona", "Persona", id="conversation_persona", show=False),
        Binding("alt+r", "rename", "Rename conversation", id="rename", show=False, priority=True),
        Binding("alt+e", "export", "Export conversation", id="export", show=False, priority=True),
        # Priority: the message box has the focus and would type the "c" otherwise.
        Binding("alt+c", "copy_message", "Copy", id="copy", show=False, priority=True),
        Binding("ctrl+b", "back", "Back", id="back"),
        # Group chats, impersonate and quick replies (issue 31).
        # Priority: the message box (a TextArea) binds F6 and F7, and types letters.
        Binding(
            "alt+p", "pick_speaker", "Who speaks next", id="pick_speaker", show=False, priority=True
        ),
        Binding("alt+i", "impersonate", "Impersonate", id="impersonate", show=False, priority=True),
        Binding(
            "alt+a", "auto_run", "Cast goes on (auto)", id="auto_run", show=False, priority=True
        ),
        Binding(
            "alt+q", "quick_replies", "Quick replies", id="quick_replies", show=False, priority=True
        ),
        Binding("alt+g", "add_member", "Add to group", id="add_member", show=False, priority=True),
        Binding(
            "alt+x",
            "remove_member",
            "Take out of group",
            id="remove_member",
            show=False,
            priority=True,
        ),
        Binding("alt+u", "mute_member", "Mute member", id="mute_member", show=False, priority=True),
        *(
            Binding(
                f"alt+{n}",
                f"quick_reply({n})",
                f"Quick reply {n}",
                id=f"quick_reply_{n}",
                show=False,
                priority=True,
            )
            for n in range(1, 10)
        ),
    ]

    FOOTER_FIRST = frozenset(
        {"go_on_without_fold", "send", "inspector", "regenerate", "back", "quit", "help"}
    )

    # Only the bindings (the footer) depend on it: no repaint of the whole screen when it flips.
    streaming: reactive[bool] = reactive(False, repaint=False, bindings=True)
    fold_waiting: reactive[bool] = reactive(False, repaint=False, bindings=True)

    def __init__(
        self,
        reader: ConversationReader,
        conversation: StoredConversation,
        service: ChatService | None = None,
        unavailable: str = "",
        *,
        at_message: int | None = None,
    ) -> None:
        super().__init__()
        self.at_message = at_message  # opened from a search: shown there, selected
        self.reader = reader
        self.service = service
        # Why there is no service (the model could not be loaded): said when the user sends.
        self.unavailable = unavailable or "the model is not loaded"
        self.conversation = conversation
        self.conv_id = conversation.id

        self.turn: Turn | None = None
        self.run: GroupRun | None = None  # a group's replies, one after another
        self._run_turns: AsyncIterator[Turn] | None = None
        self.attachments: list[tuple[str, str]] = []  # (digest, file name)
        self.selected: MessageView | None = None
        self._oldest_id: int | None = None
        self._at_end = True  # the newest messages are shown (not a page opened further back)
        self.expressions: list[Expression] = []  # the card's expression pictures (if any)
        self._card_image: CardImage | None = None
        self.turns_ended = 0  # turns that ran to their end (tests and scripts wait on it)
        self.runs_ended = 0  # asks that ran to their end (a group's: all its replies)
        self.impersonated = 0  # lines impersonate wrote into the box

    # ---- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="chat-body"):
            with Vertical(id="chat-column"):
                with VerticalScroll(id="log") as log_view:
                    log_view.border_title = literal_line(self.conversation.character_name)
                    yield Button("▲ earlier messages", id="earlier", compact=True)
                yield Button("▼ newer messages (to the end)", id="later", compact=True)
                yield Static(id="attachments")
                yield ChatInput(id="input")
            yield ExpressionPane(self.conversation.character_name, id="expressions")
            yield InspectorPane(id="inspector")
        yield StatusLine()
        yield Footer()

    def on_mount(self) -> None:
        conv = self.conversation
        self.title = visible(conv.character_name, one_line=True)
        if self.service is not None and self.service.groups.is_group(self.conv_id):
            names = [m.character_name for m in self.service.groups.cast(self.conv_id)]
            self.title = visible(", ".join(names), one_line=True)  # the whole cast
        self._show_sub_title()
        inspector = self.query_one(InspectorPane)
        inspector.display = self.kotonia.inspector_open
        self.query_one("#attachments", Static).display = False
        self.query_one("#later", Button).display = False
        self.load_expressions()
        log_view = self.query_one("#log", VerticalScroll)
        if self.at_message is not None:
            self.jump_to(self.at_message)
        messages = [] if self.at_message is not None else self.reader.messages(self.conv_id, PAGE)
        self.query_one("#earlier", Button).display = len(messages) >= PAGE
        self._oldest_id = messages[0].id if messages else None
        log_view.mount_all(self._views_for(messages))
        if not messages and self.at_message is None:
            log_view.mount(
                Static(
                    literal(f"Nothing here yet. Say hello to {conv.character_name}."),
                    classes="empty",
                    id="log-empty",
                )
            )
        if self.at_message is None:
            log_view.anchor()
        chat_input = self.query_one(ChatInput)
        if self.service is None:
            chat_input.placeholder = (
                "Read only: the model could not be loaded (see `kotonia doctor`)"
            )
        else:
            # The conversation's saved KV state loads while the user reads and types.
            self.run_worker(self.service.open_conversation(self.conv_id), group="restore")
        chat_input.focus()
        if inspector.display:
            # After this handler: until it returns the screen does not count as mounted, and
            # the inspector stayed blank until the first turn ended.
            self.call_after_refresh(self.refresh_memory)
        self.set_interval(1.0, self._tick)

    def _show_sub_title(self) -> None:
        conv = self.conversation
        played = f" · as {conv.persona_name}" if conv.persona_name else ""
        self.sub_title = visible(
            f"{conv.title or f'conversation {conv.id}'}{played}", one_line=True
        )

    def _views_for(
        self, messages: Sequence[StoredMessage], first_number: int | None = None
    ) -> list[MessageView]:
        """Views numbered in the conversation (1 = its first message) from the first's place."""
        if not messages:
            return []
        if first_number is None:
            first_id = messages[0].id
            first_number = self.reader.message_numbers(self.conv_id, [first_id]).get(first_id, 1)
        return [MessageView(m, number=first_number + i) for i, m in enumerate(messages)]

    def _next_number(self) -> int:
        views = self._views()
        last = views[-1].number if views else None
        return (last or 0) + 1

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

    def _remove_empty_note(self) -> None:
        for note in self.query("#log-empty"):
            note.remove()

    # ---- actions: sending ------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel":
            return self.streaming
        if action == "go_on":
            return self.fold_waiting
        if action in {
            "regenerate",
            "continue_reply",
            "alternative",
            "edit",
            "delete",
            "undo_delete",
            "branch",
            "persona",
            "pick_speaker",
            "impersonate",
            "auto_run",
            "quick_replies",
            "quick_reply",
        }:
            return None if self.streaming else True
        return True

    def on_chat_input_submitted(self, event: ChatInput.Submitted) -> None:
        event.stop()
        if self.streaming:
            notify(self, "A reply is still being written (Esc stops it).", severity="warning")
            return
        text = event.text
        if text.strip() or self.attachments:
            self.run_turn(Ask.SEND, text)
            return
        views = self._views()
        last = views[-1].message if views else None
        if last is None or last.role is not Role.CHARACTER:
            # An empty send answers a message of the user's left without a reply (a reply
            # stopped before its first word, a chat imported ending with the user).
            self.run_turn(Ask.ANSWER)
        else:
            notify(self, "Type a message first (Ctrl+R writes another version of the reply).")

    def action_cancel(self) -> None:
        if self.run is not None:
            self.run.stop()  # a group's run: this reply and the ones after it
        if self.turn is not None:
            self.turn.cancel()
            # Said at once: the engine stops after the batch of the prompt it is reading (or
            # the token it is writing), which can take a moment on a long prompt.
            self.kotonia.turn_status = STOPPING

    def action_go_on(self) -> None:
        """The turn waiting for a fold goes on without it (the fold lands on a later turn)."""
        if self.service is not None:
            self.service.go_on_without_fold(self.conv_id)

    def _key_for(self, action: str) -> str:
        """The key bound to `action` as the footer shows it (after a remap in the settings)."""
        for bindings in self._bindings.key_to_bindings.values():
            for binding in bindings:
                if binding.action == action:
                    return self.app.get_key_display(binding)
        return ""

    def action_regenerate(self) -> None:
        self.run_turn(Ask.REGENERATE)

    def action_continue_reply(self) -> None:
        self.run_turn(Ask.CONTINUE)

    async def _start(self, service: ChatService, ask: Ask, text: str) -> Turn | None:
        """Ask the service for the turn; a sent message is shown once it is stored. In a group
        the turn is the first of a run (the others follow it: `_next_in_run`); None: nobody
        answers (manual order: the player picks with Alt+P)."""
        self.run, self._run_turns = None, None
        if ask is Ask.PICK:
            return await self._first_in_run(service.groups.reply(self.conv_id, text))
        if ask is Ask.AUTO:
            return await self._first_in_run(service.groups.auto(self.conv_id, AUTO_REPLIES))
        if ask is Ask.SEND and service.groups.is_group(self.conv_id):
            attached = tuple(digest for digest, _name in self.attachments)
            run = await service.groups.send(self.conv_id, text, attached)
            self.query_one(ChatInput).clear()
            self._set_attachments([])
            self._remove_empty_note()
            user = service.store.last_message(self.conv_id)
            if user is not None:
                await self.query_one("#log", VerticalScroll).mount(
                    MessageView(user, number=self._next_number())
                )
            first = await self._first_in_run(run)
            if first is None:
                notify(self, f"Pick who answers: {self._key_for('pick_speaker')}.")
            return first
        if ask is Ask.SEND:
            images = [digest for digest, _name in self.attachments]
            turn = await service.send(self.conv_id, text, images)
            # The user's message is stored: only now does the box empty.
            self.query_one(ChatInput).clear()
            self._set_attachments([])
            self._remove_empty_note()
            if turn.user_message is not None:
                await self.query_one("#log", VerticalScroll).mount(
                    MessageView(turn.user_message, number=self._next_number())
                )
            return turn
        if ask is Ask.ANSWER:
            if service.groups.is_group(self.conv_id):
                return await self._first_in_run(service.groups.answer(self.conv_id))
            return await service.answer(self.conv_id)
        if ask is Ask.REGENERATE:
            return await service.regenerate(self.conv_id)
        return await service.continue_reply(self.conv_id)

    async def _first_in_run(self, run: GroupRun) -> Turn | None:
        self.run, self._run_turns = run, run.__aiter__()
        return await self._next_in_run()

    async def _next_in_run(self) -> Turn | None:
        """The next reply of the group's run (after the last one ended), None at its end."""
        if self._run_turns is None:
            return None
        try:
            return await anext(self._run_turns)
        except StopAsyncIteration:
            self.run, self._run_turns = None, None
            return None

    @work(exclusive=True, group="turn")
    async def run_turn(self, ask: Ask, text: str = "") -> None:
        """A turn, and in a group every reply of its run, one after another."""
        turn: Turn | None = None
        try:
            while True:
                turn = await self._one_turn(ask, text, turn)
                if turn is None or self._run_turns is None:
                    return
        finally:
            self.run, self._run_turns = None, None
            self.runs_ended += 1

    async def _one_turn(self, ask: Ask, text: str, previous: Turn | None) -> Turn | None:
        """Stream one reply: the turn `ask` starts, or (after `previous`) the run's next."""
        service = self.service
        if service is None:
            notify(self, self.unavailable, title="Read only", severity="warning", timeout=10)
            return None
        log_view = self.query_one("#log", VerticalScroll)
        if not self._at_end:
            await self._reload()  # a page opened further back: the turn goes at the end
        self.streaming = True
        self.kotonia.turn_status = "preparing the prompt…"
        target: MessageView | None = None
        view: MessageView
        try:
            found = await self._start(service, ask, text) if previous is None else None
            if previous is not None:
                found = await self._next_in_run()
            if found is None:
                self.streaming = False
                self.kotonia.turn_status = ""
                if previous is None:
                    self.turns_ended += 1
                return None
            turn = found
            if turn.target is None:
                # A new reply (to a message just sent, or to one left without an answer).
                self._remove_empty_note()
                view = MessageView(
                    None, speaker=turn.setup.display_name, number=self._next_number()
                )
                await log_view.mount(view)
                view.start_stream()
            else:
                target = self._view_of(turn.target.id)
                if target is None:
                    await self._reload()
                    target = self._view_of(turn.target.id)
                assert target is not None
                view = target
                if turn.kind is TurnKind.REGENERATE:
                    count = max(1, len(turn.target.alternatives))
                    view.start_stream(note=f"writing version {count + 1}…")
                else:
                    view.start_stream(prefix=view.text, note="continuing…")
            log_view.anchor()
        except Exception as exc:
            # Nothing is lost: a new message's text stays in the box.
            log.warning("turn could not start: %s", exc)
            notify(self, str(exc), title="Not sent", severity="error", timeout=10)
            self.streaming = False
            self.kotonia.turn_status = ""
            if ask is Ask.SEND:
                await self._reload()
            self.turns_ended += 1
            return None

        self.turn = turn
        count = 0
        self.kotonia.turn_status = "writing… (Esc stops)"
        try:
            async for event in turn:
                if isinstance(event, ReplyDelta):
                    count += 1
                    view.append(event.text)
                    if count % 16 == 0 and not turn.stopping:
                        self.kotonia.turn_status = f"writing… {count} tokens (Esc stops)"
                elif isinstance(event, TurnDone):
                    self._finish(view, target, event)
        finally:
            if turn.done is None:
                # This worker was cancelled (the screen was closed, the app is quitting): the
                # service's turn stops and stores what it wrote.
                turn.interrupt("the chat was closed")
            self.turn = None
            self.turns_ended += 1
            self.streaming = False
            self.kotonia.turn_status = ""
            self.refresh_memory()
        return turn

    def _finish(self, view: MessageView, target: MessageView | None, done: TurnDone) -> None:
        if done.reply is not None:
            view.finish(done.reply)
            self.show_expression()
            if done.reply.status is MessageStatus.CUT and done.reply.status_reason:
                notify(self, done.reply.status_reason, title="Reply cut", severity="warning")
        elif target is not None:
            # Regenerate or continue stopped with nothing new: the stored reply stands.
            view.finish(view.message)
            if done.error:
                notify(self, done.error, title="No new version", severity="warning")
        elif done.error == NOTHING_WRITTEN:
            view.remove()
            notify(
                self, "Stopped before the first word. Enter on an empty box (or Ctrl+R) asks again."
            )
        elif done.error == NO_REPLY:
            view.remove()
            notify(self, NO_REPLY, title="No reply", severity="warning")
        else:
            view.finish(None, error=done.error or "the turn ended without a reply")
            if done.error:
                notify(
                    self, done.error, title="The model call failed", severity="error", timeout=10
                )

    async def _reload(self) -> None:
        log_view = self.query_one("#log", VerticalScroll)
        for view in self._views():
            await view.remove()
        self._at_end = True
        self.query_one("#later", Button).display = False
        self.selected = None
        messages = self.reader.messages(self.conv_id, limit=PAGE)
        self._oldest_id = messages[0].id if messages else None
        self.query_one("#earlier", Button).display = len(messages) >= PAGE
        await log_view.mount_all(self._views_for(messages))
        log_view.anchor()

    @work(exclusive=True, group="page")
    async def jump_to(self, message_id: int) -> None:
        """Show the page around a message (a search result) and select it."""
        log_view = self.query_one("#log", VerticalScroll)
        half = PAGE // 2
        before = self.reader.messages(self.conv_id, limit=half, before_id=message_id)
        after = self.reader.messages_from(self.conv_id, message_id, half + 1)
        if not after or after[0].id != message_id:
            notify(self, f"Message {message_id} is no longer in this conversation.")
            return
        for view in self._views():
            await view.remove()
        self._remove_empty_note()
        self.selected = None
        messages = before + after
        self._oldest_id = messages[0].id
        self.query_one("#earlier", Button).display = len(before) >= half
        newest = self.reader.messages(self.conv_id, limit=1)
        self._at_end = bool(newest) and newest[-1].id == messages[-1].id
        self.query_one("#later", Button).display = not self._at_end
        log_view.anchor(False)
        await log_view.mount_all(self._views_for(messages))
        target = self._view_of(message_id)
        if target is not None:
            self._select(target)
            self.call_after_refresh(log_view.scroll_to_widget, target, animate=False, center=True)

    async def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "later":
            event.stop()
            await self._reload()
            return
        if event.button.id != "earlier" or self._oldest_id is None:
            return
        event.stop()
        older = self.reader.messages(self.conv_id, limit=PAGE, before_id=self._oldest_id)
        button = self.query_one("#earlier", Button)
        button.display = len(older) >= PAGE
        if older:
            self._oldest_id = older[0].id
            views = self._views()
            first = views[0].number if views and views[0].number else len(older) + 1
            log_view = self.query_one("#log", VerticalScroll)
            await log_view.mount_all(
                self._views_for(older, first_number=first - len(older)), after=button
            )

    # ---- actions: group chats, impersonate, quick replies (issue 31) -------------------------

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

    def action_quick_replies(self) -> None:
        service = self._live_service()
        if service is None:
            return
        replies = service.quick_replies(self.conv_id)
        if not replies:
            notify(self, "No quick replies yet.")
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
        service.groups.remove_member(self.conv_id, key)
        return f"{key} left the group (their lines stay in the story)."

    def _toggle_mute(self, service: ChatService, key: str) -> str:
        member = next(m for m in service.groups.cast(self.conv_id) if m.character_key == key)
        service.groups.set_muted(self.conv_id, key, not member.muted)
        return f"{member.character_name} is {'unmuted' if member.muted else 'muted'}."

    # ---- actions: versions, selection, edits -----------------------------------------------

    def _live_service(self) -> ChatService | None:
        """The chat service, or None after saying why there is none (read only)."""
        if self.service is None:
            notify(self, self.unavailable, title="Read only", severity="warning", timeout=10)
        return self.service

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

    def _open_instead(self, conv: StoredConversation) -> None:
        self.app.switch_screen(ChatScreen(self.reader, conv, self.service, self.unavailable))

    def action_copy_message(self) -> None:
        view = self._target()
        if view is None or not view.text:
            return
        self.app.copy_to_clipboard(view.text)
        label = view.label if view.message_id else "the reply"
        notify(self, f"Copied {label} to the clipboard.")

    def action_settings(self) -> None:
        service = self._live_service()
        if service is None:
            return
        try:
            view = service.settings_view(self.conv_id)
        except Exception as exc:
            notify(self, str(exc), title="Settings", severity="error", timeout=10)
            return

        def done(saved: bool | None) -> None:
            if saved:
                notify(self, "Settings saved: the next turn uses them.")
                # "left out: over the budget" and the like were said of the settings before.
                self.kotonia.forget_notice(self.conv_id)
                self.refresh_memory()

        self.app.push_screen(ChatSettingsScreen(service, view), done)

    def action_back(self) -> None:
        if self.turn is not None:
            self.turn.interrupt("the chat was closed")
        self.app.pop_screen()

    # ---- expressions -----------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="expressions")
    def load_expressions(self) -> None:
        """Read the card's expression pictures off the event loop (a CHARX can be large)."""
        library = self.reader.library
        card = library.card_of(self.conversation.character_key, self.conversation.character_name)
        if card is None:
            return
        expressions, problems = library.expressions(card)
        for problem in problems:
            log.warning("%s", problem)
        self.app.call_from_thread(self._expressions_loaded, expressions, card.image, problems)

    def _expressions_loaded(
        self, expressions: list[Expression], image: CardImage | None, problems: list[str]
    ) -> None:
        if problems:
            more = f" (and {len(problems) - 1} more, in the log)" if len(problems) > 1 else ""
            notify(self, problems[0] + more, title="Expressions", severity="warning")
        if not self.is_attached:
            return  # the chat was closed while the pictures were read
        self.expressions = expressions
        self._card_image = image
        self.query_one(ExpressionPane).set_class(bool(expressions), "-shown")
        self.show_expression()

    @work(exclusive=True, group="expression")
    async def show_expression(self) -> None:
        """The picture the last reply's mood calls for (and its name under the chat)."""
        if not self.expressions:
            return
        replies = [v.message for v in self._views() if v.message is not None]
        last = next((m for m in reversed(replies) if m.role is Role.CHARACTER), None)
        chosen = expression_for(last.text if last is not None else "", self.expressions)
        await self.query_one(ExpressionPane).show(chosen, self._card_image)
        name = chosen.expression.name if chosen.expression is not None else "picture"
        self.query_one("#log", VerticalScroll).border_subtitle = literal_line(f"mood: {name}")

    # ---- attachments -----------------------------------------------------------------------

    def action_attach(self) -> None:
        service = self._live_service()
        if service is None:
            return
        vision = bool(getattr(service.engine, "has_vision", False))

        def done(result: Path | str | None) -> None:
            if result is None:
                return
            if result == "clear":
                self._set_attachments([])
                return
            path = Path(result)
            try:
                digest = service.attach_image(path)
            except Exception as exc:
                notify(self, str(exc), title="Not attached", severity="error", timeout=10)
                return
            self._set_attachments([*self.attachments, (digest, path.name)])
            self.query_one(ChatInput).focus()

        self.app.push_screen(AttachScreen(Path.cwd(), len(self.attachments), vision), done)

    def _set_attachments(self, attachments: list[tuple[str, str]]) -> None:
        self.attachments = attachments
        row = self.query_one("#attachments", Static)
        row.display = bool(attachments)
        names = ", ".join(name for _digest, name in attachments)
        row.update(literal_line(f"📎 {names}  (sent with the next message · F3 to change)"))

    # ---- the memory inspector --------------------------------------------------------------

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
        numbers = self.reader.message_numbers(self.conv_id, [m.id for m in evidence])
        self.app.push_screen(ledger_page(event.entry, evidence, numbers))

    def on_inspector_pane_open_synopsis_versions(
        self, event: InspectorPane.OpenSynopsisVersions
    ) -> None:
        inspector = self.query_one(InspectorPane)
        view = inspector.view
        if view is not None:
            self.app.push_screen(synopsis_page(view.synopsis_versions, view))

    def status_line(self) -> StatusLine | None:
        found = self.query(StatusLine)
        return found.first() if found else None
