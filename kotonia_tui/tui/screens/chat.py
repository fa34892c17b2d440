"""The chat screen: the conversation, the message box, and the memory inspector beside them.

This module holds the screen's layout, its keys, paging through the messages, attachments and
settings; the rest is in its parts (chat_base.py lists them), mixed in here.

Messages are read through a `ConversationReader`, so a conversation can be opened and read when
the model could not be loaded (`service` is None then, and sending says why it cannot).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.reactive import reactive
from textual.widgets import Button, Footer, Header, Static

from kotonia_tui.chat.groups import GroupRun
from kotonia_tui.chat.reader import ConversationReader
from kotonia_tui.chat.service import ChatService
from kotonia_tui.chat.turn import Turn
from kotonia_tui.domain import StoredConversation, StoredMessage
from kotonia_tui.terminal_text import visible
from kotonia_tui.tui.literal import literal, literal_line, notify
from kotonia_tui.tui.screens.chat_expressions import ExpressionActions, Pictures
from kotonia_tui.tui.screens.chat_group import GroupActions
from kotonia_tui.tui.screens.chat_inspector import InspectorActions
from kotonia_tui.tui.screens.chat_manage import ConversationActions
from kotonia_tui.tui.screens.chat_messages import MessageActions
from kotonia_tui.tui.screens.chat_quick import QuickReplyActions
from kotonia_tui.tui.screens.chat_settings import ChatSettingsScreen
from kotonia_tui.tui.screens.chat_turns import TurnActions
from kotonia_tui.tui.screens.dialogs import AttachScreen
from kotonia_tui.tui.widgets.chat_input import ChatInput
from kotonia_tui.tui.widgets.expression import ExpressionPane
from kotonia_tui.tui.widgets.inspector import InspectorPane
from kotonia_tui.tui.widgets.message_view import MessageView
from kotonia_tui.tui.widgets.status import StatusLine

PAGE = 100  # messages loaded at a time


class ChatScreen(
    TurnActions,
    GroupActions,
    QuickReplyActions,
    MessageActions,
    ExpressionActions,
    InspectorActions,
    ConversationActions,
):
    """One conversation."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Stop reply", id="cancel", priority=True),
        # Shown only while a turn waits for a fold (the message box has the focus: priority).
        Binding("ctrl+o", "go_on", "Go on without memory", id="go_on_without_fold", priority=True),
        Binding("f2", "toggle_inspector", "Memory", id="inspector"),
        Binding("f3", "attach", "Attach", id="attach"),
        Binding(
            "alt+w", "cast_memory", "Memory by speaker", id="cast_memory", show=False, priority=True
        ),
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
        Binding("alt+o", "reply_order", "Reply order", id="reply_order", show=False, priority=True),
        Binding("alt+i", "impersonate", "Impersonate", id="impersonate", show=False, priority=True),
        Binding(
            "alt+a", "auto_run", "Cast goes on (auto)", id="auto_run", show=False, priority=True
        ),
        Binding(
            "alt+q", "quick_replies", "Quick replies", id="quick_replies", show=False, priority=True
        ),
        Binding(
            "alt+k",
            "edit_quick_replies",
            "Edit quick replies",
            id="edit_quick_replies",
            show=False,
            priority=True,
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
        self.pictures: dict[str, Pictures] = {}  # each member's expressions (if any), by key
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
        self.show_cast()
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
        order = ""
        if self.service is not None and self.service.groups.is_group(self.conv_id):
            # Who answers is part of how a group plays: said where the cast is (Alt+O changes it).
            order = f" · {self.service.groups.reply_order(self.conv_id).value} order"
        self.sub_title = visible(
            f"{conv.title or f'conversation {conv.id}'}{played}{order}", one_line=True
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

    # ---- which actions apply now -----------------------------------------------------------

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
            "reply_order",
            "impersonate",
            "auto_run",
            "quick_replies",
            "quick_reply",
        }:
            return None if self.streaming else True
        return True

    # ---- paging through the messages -------------------------------------------------------

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

    def _open_instead(self, conv: StoredConversation) -> None:
        self.app.switch_screen(ChatScreen(self.reader, conv, self.service, self.unavailable))

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

    def status_line(self) -> StatusLine | None:
        found = self.query(StatusLine)
        return found.first() if found else None
