"""The quick-reply editor (issue 31): the conversation's quick replies (the global ones, then
each cast member's), added, edited and deleted in the app. A reply is global or one
character's, sent at once or put into the message box to edit; the list's order is the order
of Alt+1..9."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import (
    Button,
    Checkbox,
    Input,
    Label,
    ListItem,
    ListView,
    Select,
    Static,
    TextArea,
)

from kotonia_tui.chat.service import ChatService
from kotonia_tui.domain import QuickReply, StoredQuickReply
from kotonia_tui.tui.literal import literal_line, notify
from kotonia_tui.tui.screens.dialogs import ConfirmScreen

GLOBAL = "\x00global"  # the scope value of a reply every chat has (no card key starts so)


def reply_line(number: int, reply: StoredQuickReply, names: dict[str, str]) -> str:
    whose = names.get(reply.character_key, reply.character_key) if reply.character_key else ""
    scope = f"{whose}'s" if whose else "global"
    how = "sent" if reply.send else "into the box"
    first = reply.text.splitlines()[0] if reply.text else ""
    shown = first if len(first) <= 40 else first[:39] + "…"
    key = f"Alt+{number}" if number <= 9 else "list only"
    return f"{key}  {reply.label} · {scope} · {how}: {shown}"


class QuickReplyItem(ListItem):
    def __init__(self, number: int, reply: StoredQuickReply, names: dict[str, str]) -> None:
        super().__init__(Label(literal_line(reply_line(number, reply, names))))
        self.reply = reply


class QuickReplyForm(ModalScreen[QuickReply | None]):
    """One quick reply's label, text, whose it is and whether it is sent. Ctrl+S saves."""

    DEFAULT_CSS = """
    QuickReplyForm #qr-text { height: 6; }
    QuickReplyForm #qr-error { color: $error; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "save", "Save", id="quick_reply_save", priority=True),
        Binding("escape", "cancel", "Cancel", id="quick_reply_cancel"),
    ]

    def __init__(self, reply: QuickReply, cast: list[tuple[str, str]]) -> None:
        super().__init__()
        self.reply = reply
        self.cast = cast  # (key, name) of the conversation's cards

    def compose(self) -> ComposeResult:
        reply = self.reply
        title = "New quick reply" if reply.id is None else f"Edit quick reply {reply.label}"
        scopes = [("Global (every chat)", GLOBAL)] + [(f"{n}'s own", k) for k, n in self.cast]
        known = {key for key, _name in self.cast}
        if reply.character_key and reply.character_key not in known:
            # A card no longer in this chat: kept as it is unless the player changes it.
            scopes.append((f"{reply.character_key}'s own", reply.character_key))
        with Vertical(classes="dialog wide") as box:
            box.border_title = literal_line(title)
            yield Static("Label", classes="field-label")
            yield Input(reply.label, id="qr-label")
            yield Static("Text", classes="field-label")
            yield TextArea(reply.text, id="qr-text", soft_wrap=True)
            yield Select(
                scopes, value=reply.character_key or GLOBAL, allow_blank=False, id="qr-scope"
            )
            yield Checkbox("Sent at once (off: put into the message box)", reply.send, id="qr-send")
            yield Static("", id="qr-error", classes="hint")
            yield Static("Ctrl+S saves · Esc cancels", classes="hint")
            with Horizontal(classes="buttons"):
                yield Button("Save", variant="primary", id="save")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#qr-label", Input).focus()

    def action_save(self) -> None:
        label = self.query_one("#qr-label", Input).value.strip()
        text = self.query_one("#qr-text", TextArea).text
        error = self.query_one("#qr-error", Static)
        if not label:
            error.update(literal_line("The label is empty: it names the reply in the list."))
            return
        if not text.strip():
            error.update(literal_line(f"Quick reply {label!r}: its text is empty."))
            return
        scope = self.query_one("#qr-scope", Select).value
        key = scope if isinstance(scope, str) and scope != GLOBAL else None
        self.dismiss(
            self.reply.model_copy(
                update={
                    "label": label,
                    "text": text,
                    "character_key": key,
                    "send": self.query_one("#qr-send", Checkbox).value,
                }
            )
        )

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "save":
            self.action_save()
        else:
            self.action_cancel()


class QuickRepliesScreen(ModalScreen[None]):
    """The conversation's quick replies: A adds, Enter edits, Delete removes, Esc closes."""

    DEFAULT_CSS = """
    QuickRepliesScreen #qr-list { height: auto; max-height: 16; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "add", "Add", id="quick_replies_add"),
        Binding("e", "edit", "Edit", id="quick_replies_edit", show=False),
        Binding("delete,d", "delete", "Delete", id="quick_replies_delete"),
        Binding("escape", "close", "Close", id="quick_replies_close"),
    ]

    def __init__(self, service: ChatService, conv_id: int) -> None:
        super().__init__()
        self.service = service
        self.conv_id = conv_id
        members = service.groups.cast(conv_id)
        self.cast = [(m.character_key, m.character_name) for m in members]
        self.names = dict(self.cast)
        self.changed = 0  # saves and deletions (tests wait on it)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide") as box:
            box.border_title = "Quick replies"
            yield Static(id="qr-empty", classes="hint")
            yield ListView(id="qr-list")
            yield Static(
                "A adds · Enter edits · Delete removes · Esc closes (global ones first, then "
                "each character's own: that order is Alt+1..9)",
                classes="hint",
            )

    def on_mount(self) -> None:
        self.show_replies()
        self.query_one("#qr-list", ListView).focus()

    def show_replies(self, selected: int | None = None) -> None:
        replies = self.service.quick_replies(self.conv_id)
        listing = self.query_one("#qr-list", ListView)
        listing.clear()
        listing.extend(
            QuickReplyItem(n, reply, self.names) for n, reply in enumerate(replies, start=1)
        )
        ids = [reply.id for reply in replies]
        listing.display = bool(replies)
        empty = self.query_one("#qr-empty", Static)
        empty.update("No quick replies yet: A adds one." if not replies else "")
        empty.display = not replies
        if replies:
            listing.index = ids.index(selected) if selected in ids else 0

    def _highlighted(self) -> StoredQuickReply | None:
        item = self.query_one("#qr-list", ListView).highlighted_child
        return item.reply if isinstance(item, QuickReplyItem) else None

    def _edit(self, reply: QuickReply) -> None:
        def done(edited: QuickReply | None) -> None:
            if edited is None:
                return
            try:
                saved = self.service.save_quick_reply(edited)
            except Exception as exc:
                notify(self, str(exc), title="Not saved", severity="error")
                return
            self.changed += 1
            self.show_replies(saved.id)
            notify(self, f"Quick reply {saved.label!r} saved.")

        self.app.push_screen(QuickReplyForm(reply, self.cast), done)

    def action_add(self) -> None:
        self._edit(QuickReply(label="", text=""))

    def action_edit(self) -> None:
        reply = self._highlighted()
        if reply is not None:
            self._edit(reply)

    def on_list_view_selected(self, event: ListView.Selected) -> None:
        event.stop()
        if isinstance(event.item, QuickReplyItem):
            self._edit(event.item.reply)

    def action_delete(self) -> None:
        reply = self._highlighted()
        if reply is None:
            return

        def confirmed(yes: bool | None) -> None:
            if not yes:
                return
            try:
                self.service.delete_quick_reply(reply.id)
            except Exception as exc:
                notify(self, str(exc), title="Not deleted", severity="error")
                return
            self.changed += 1
            self.show_replies()
            notify(self, f"Quick reply {reply.label!r} deleted.")

        self.app.push_screen(ConfirmScreen(f"Delete quick reply {reply.label!r}?"), confirmed)

    def action_close(self) -> None:
        self.dismiss(None)
