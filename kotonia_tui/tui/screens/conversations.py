"""One character's conversations: resume one, or start a new one with a chosen greeting and
persona; rename, duplicate, delete (undo until the app closes), import and export them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Footer, Header, Label, ListItem, ListView, LoadingIndicator, Static

from kotonia_tui.characters.card import CharacterCard
from kotonia_tui.chat.managing import ConversationManager, conversation_title
from kotonia_tui.domain import Role, StoredConversation
from kotonia_tui.terminal_text import visible
from kotonia_tui.tui.literal import literal, literal_line, notify
from kotonia_tui.tui.render import age, fill_macros, message_body, plural, short_text
from kotonia_tui.tui.screens.ask import AskTextScreen
from kotonia_tui.tui.screens.base import KotoniaScreen
from kotonia_tui.tui.screens.dialogs import ConfirmScreen
from kotonia_tui.tui.screens.files import CHAT_SUFFIXES, OpenFileScreen, SaveFileScreen
from kotonia_tui.tui.screens.personas import PersonasScreen
from kotonia_tui.tui.widgets.portrait import Portrait
from kotonia_tui.tui.widgets.status import StatusLine

GREETINGS_AT_ONCE = 25  # rows mounted per batch (about 5 ms each)


def conversation_id(conv: StoredConversation) -> str:
    """The conversation's store id as the list and its dialogs show it: "id 12", what
    `--conversation ID` and `kotonia delete ID` take. Never "#12", which everywhere else in
    the app is the 12th message of a conversation."""
    return f"id {conv.id}"


class ConversationItem(ListItem):
    def __init__(self, conv: StoredConversation, preview: str, cast: Sequence[str] = ()) -> None:
        label = Content.assemble(
            literal_line(conversation_title(conv), "bold"),
            (
                f"  {conversation_id(conv)} · {plural(conv.message_count, 'message')} · "
                f"{age(conv.updated_at)}",
                "$text-muted",
            ),
            literal_line(f" · as {conv.persona_name}" if conv.persona_name else "", "$text-muted"),
            # A group is listed under each of its cards: say whom it is with.
            literal_line(f" · group: {', '.join(cast)}" if len(cast) > 1 else "", "$text-muted"),
            "\n",
            literal_line(short_text(preview, 80) or "(no messages)", "$text-muted"),
        )
        super().__init__(Label(label))
        self.conversation = conv


class GreetingItem(ListItem):
    """A greeting, shown with its macros filled for the persona the new conversation is for."""

    def __init__(self, index: int, raw: str, card: CharacterCard, user: str) -> None:
        self._label = Label()
        super().__init__(self._label)
        self.index = index
        self.raw = raw
        self.card = card
        self.text = ""
        self.fill(user)

    def fill(self, user: str) -> None:
        self.text = fill_macros(self.raw, self.card.name, user)
        name = "First message" if self.index == 0 else f"Alternate greeting {self.index}"
        self._label.update(
            Content.assemble(
                (name, "bold"), "\n", literal_line(short_text(self.text, 80), "$text-muted")
            )
        )


class ConversationsScreen(KotoniaScreen[None]):
    """Resume or start."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Characters", id="back_to_characters"),
        Binding("n", "focus_greetings", "New conversation", id="new_conversation"),
        Binding("p", "persona", "Persona", id="new_conversation_persona"),
        Binding("r", "rename", "Rename", id="rename_conversation"),
        Binding("c", "duplicate", "Duplicate", id="duplicate_conversation", show=False),
        Binding("delete,d", "delete", "Delete", id="delete_conversation"),
        Binding("ctrl+z,u", "undo", "Undo delete", id="undo_delete_conversation", show=False),
        Binding("i", "import_chat", "Import", id="import_chat"),
        Binding("x", "export_chat", "Export", id="export_chat"),
    ]
    FOOTER_FIRST = frozenset(
        {"back_to_characters", "new_conversation", "delete_conversation", "quit", "help"}
    )

    def __init__(self, card: CharacterCard) -> None:
        super().__init__()
        self.card = card
        self._loaded = False
        self.persona_id: int | None = None  # who new conversations are played as (None: default)
        self.persona_name = ""
        self._select: int | None = None  # the conversation the next fill of the list goes to

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="conversations"):
            with Vertical(id="resume-box") as box:
                box.border_title = "Resume a conversation"
                yield LoadingIndicator(id="conv-loading")
                yield ListView(id="conv-list")
                yield Static(id="conv-empty", classes="empty")
            with Vertical(id="new-box") as box:
                box.border_title = "Start a new one"
                with Horizontal(id="new-top"):
                    yield Portrait(self.card.image, self.card.display_name, classes="small")
                    yield ListView(id="greeting-list")
                with VerticalScroll(id="greeting-preview-box"):
                    yield Static(id="greeting-preview")
                yield Static(id="new-persona")
        yield StatusLine()
        yield Footer()

    def on_mount(self) -> None:
        self.title = visible(self.card.display_name, one_line=True)
        self.sub_title = "conversations"
        self.persona_name = self.kotonia.user_name()
        self._show_persona()
        greetings = [g for g in [self.card.first_mes, *self.card.alternate_greetings] if g]
        listing = self.query_one("#greeting-list", ListView)
        if greetings:
            items = [
                GreetingItem(i, g, self.card, self.persona_name) for i, g in enumerate(greetings)
            ]
            listing.extend(items[:GREETINGS_AT_ONCE])
            if len(items) > GREETINGS_AT_ONCE:
                self._mount_more_greetings(items[GREETINGS_AT_ONCE:])
        else:
            listing.append(
                GreetingItem(0, "(this card has no greeting: you speak first)", self.card, "")
            )
        listing.index = 0
        self.query_one("#conv-list", ListView).display = False
        self.query_one("#conv-empty", Static).display = False
        self.load_conversations()

    def on_screen_resume(self) -> None:
        # Back from a chat: its new messages change the list (counts, previews, order).
        if self._loaded:
            self.load_conversations()

    def load_conversations(self, select: int | None = None) -> None:
        """Fill the list; the cursor stays on the conversation it was on (the list re-sorts by
        the newest message), or goes to `select` (a conversation just made, imported or brought
        back). `select` holds until a fill ends: a dialog's answer reloads the list, and so
        does the screen coming back when the dialog closes, which cancels the first fill."""
        if select is not None:
            self._select = select
        self._fill_list()

    @work(exclusive=True, group="conversations")
    async def _fill_list(self) -> None:
        reader = await self.kotonia.wait_reader()
        if self.persona_id is None and self.persona_name != self.kotonia.user_name():
            # The default persona is known once the database is open.
            self.persona_name = self.kotonia.user_name()
            self._show_persona()
            for item in self.query_one("#greeting-list", ListView).query(GreetingItem):
                item.fill(self.persona_name)
        self._loaded = True
        self.query_one("#conv-loading").display = False
        if reader is None:
            empty = self.query_one("#conv-empty", Static)
            empty.update(literal("The conversations cannot be read; see the error above."))
            empty.display = True
            self.query_one("#greeting-list", ListView).focus()
            return
        convs = reader.conversations_of(self.card)
        listing = self.query_one("#conv-list", ListView)
        previous = listing.index
        highlighted = listing.highlighted_child
        select = self._select
        if select is None and isinstance(highlighted, ConversationItem):
            select = highlighted.conversation.id
        await listing.clear()
        casts = reader.casts()  # one read for the whole list, not one a conversation
        for conv in convs:
            last = reader.messages(conv.id, limit=1)
            preview = f"{last[-1].speaker}: {last[-1].text}" if last else ""
            cast = [member.character_name for member in casts.get(conv.id, [])]
            await listing.append(ConversationItem(conv, preview, cast))
        listing.display = bool(convs)
        empty = self.query_one("#conv-empty", Static)
        empty.update(
            literal(
                f"No conversations with {self.card.display_name} yet.\n\n"
                "Pick a greeting on the right and press Enter to start one."
            )
        )
        empty.display = not convs
        if convs:
            ids = [conv.id for conv in convs]
            listing.index = (
                ids.index(select) if select in ids else min(previous or 0, len(convs) - 1)
            )
            listing.focus()
        else:
            self.query_one("#greeting-list", ListView).focus()
        self._select = None

    @work(group="greetings")
    async def _mount_more_greetings(self, items: list[GreetingItem]) -> None:
        """A card with hundreds of greetings: each row costs a few ms to mount, so the rest
        are mounted a batch at a time and the screen answers keys meanwhile."""
        listing = self.query_one("#greeting-list", ListView)
        for start in range(0, len(items), GREETINGS_AT_ONCE):
            await listing.extend(items[start : start + GREETINGS_AT_ONCE])

    def action_focus_greetings(self) -> None:
        self.query_one("#greeting-list", ListView).focus()

    def on_list_view_highlighted(self, event: ListView.Highlighted) -> None:
        if isinstance(event.item, GreetingItem):
            self.query_one("#greeting-preview", Static).update(
                message_body(event.item.text, Role.CHARACTER)
            )

    def on_list_view_selected(self, event: ListView.Selected) -> None:
        item = event.item
        if isinstance(item, ConversationItem) and item.conversation.id is not None:
            self.kotonia.open_conversation(item.conversation.id)
        elif isinstance(item, GreetingItem):
            self.kotonia.start_conversation(self.card, item.index, self.persona_id)

    # ---- the persona new conversations are played as ------------------------------------------

    def _show_persona(self) -> None:
        self.query_one("#new-persona", Static).update(
            Content.assemble(
                ("You play ", "$text-muted"),
                literal_line(self.persona_name, "bold $text-primary"),
                ("  · p changes", "$text-disabled"),
            )
        )

    def action_persona(self) -> None:
        def chosen(persona_id: int | None) -> None:
            manager = self.kotonia.manager
            if persona_id is None or manager is None:
                return
            persona = manager.personas.get(persona_id)
            self.persona_id, self.persona_name = persona.id, persona.name
            self._show_persona()
            for item in self.query_one("#greeting-list", ListView).query(GreetingItem):
                item.fill(persona.name)
            highlighted = self.query_one("#greeting-list", ListView).highlighted_child
            if isinstance(highlighted, GreetingItem):
                self.query_one("#greeting-preview", Static).update(
                    message_body(highlighted.text, Role.CHARACTER)
                )

        where = f"new conversations with {self.card.display_name}"
        self.app.push_screen(PersonasScreen(where, self.persona_id), chosen)

    # ---- managing conversations -----------------------------------------------------------------

    def _highlighted(self) -> StoredConversation | None:
        listing = self.query_one("#conv-list", ListView)
        item = listing.highlighted_child if listing.display else None
        if not isinstance(item, ConversationItem):
            notify(self, "No conversation is selected.", severity="warning")
            return None
        return item.conversation

    def _manager(self) -> ConversationManager | None:
        manager = self.kotonia.manager
        if manager is None:
            notify(self, "The conversations cannot be changed yet.", severity="warning")
        return manager

    def action_rename(self) -> None:
        conv, manager = self._highlighted(), self._manager()
        if conv is None or manager is None:
            return

        def renamed(_conv: StoredConversation) -> None:
            self.load_conversations()

        rename_conversation(self, manager, conv, renamed)

    def action_duplicate(self) -> None:
        conv, manager = self._highlighted(), self._manager()
        if conv is None or manager is None:
            return
        try:
            copy = manager.duplicate(conv.id).conversation
        except Exception as exc:
            notify(self, str(exc), title="Not duplicated", severity="error")
            return
        notify(self, f"Made {conversation_title(copy)}, with its memory.")
        self.load_conversations(select=copy.id)

    def action_delete(self) -> None:
        conv, manager = self._highlighted(), self._manager()
        if conv is None or manager is None:
            return

        def done(yes: bool | None) -> None:
            if not yes or manager is None:
                return
            try:
                manager.delete(conv.id)
            except Exception as exc:
                notify(self, str(exc), title="Not deleted", severity="error")
                return
            notify(self, f"Deleted {conversation_title(conv)}. Ctrl+Z (or u) brings it back.")
            self.load_conversations()

        question = (
            f"Delete {conversation_title(conv)} ({conversation_id(conv)}, "
            f"{plural(conv.message_count, 'message')}) and its memory?\n\n"
            "Ctrl+Z brings it back until you quit the app."
        )
        self.app.push_screen(ConfirmScreen(question), done)

    def action_undo(self) -> None:
        manager = self._manager()
        if manager is None:
            return
        try:
            conv = manager.undo_delete()
        except Exception as exc:
            notify(self, str(exc), title="Not brought back", severity="error")
            return
        if conv is None:
            notify(self, "There is no deleted conversation to bring back.")
            return
        notify(self, f"Brought back {conversation_title(conv)}.")
        self.load_conversations(select=conv.id)

    def action_import_chat(self) -> None:
        manager = self._manager()
        if manager is None:
            return

        def done(path: Path | str | None) -> None:
            if not isinstance(path, Path) or manager is None:
                return
            try:
                imported = manager.import_file(path, self.card)
            except Exception as exc:
                notify(self, str(exc), title="Not imported", severity="error", timeout=15)
                return
            for note in imported.notes:
                notify(self, note, title="Imported with a repair", severity="warning")
            conv = imported.conversation
            card = imported.card
            if manager.library.match(conv.character_name) is None:
                where = (
                    f"no card matches {conv.character_name!r}, so it is filed under "
                    f"{self.card.display_name}"
                )
            else:
                where = f"filed under {card.display_name if card else conv.character_name}"
            notify(
                self,
                f"Imported {plural(imported.messages, 'message')} into "
                f"{conversation_title(conv)} ({where}), played as {conv.persona_name}.",
                title="Imported",
                timeout=10,
            )
            # The list is by last activity: an old chat lands among the old ones, not on top,
            # so the cursor goes to it.
            self.load_conversations(select=conv.id)

        hint = (
            "A SillyTavern chat (.jsonl) or a JSON list of {speaker, text}. It is filed under the "
            "card its character's name matches, or under this one."
        )
        self.app.push_screen(OpenFileScreen("Import a chat", Path.cwd(), CHAT_SUFFIXES, hint), done)

    def action_export_chat(self) -> None:
        conv, manager = self._highlighted(), self._manager()
        if conv is None or manager is None:
            return
        export_conversation(self, manager, conv)


def rename_conversation(
    screen: KotoniaScreen[Any],
    manager: ConversationManager,
    conv: StoredConversation,
    renamed: Callable[[StoredConversation], None],
) -> None:
    """Ask for a title and rename the conversation (the chat screen too)."""

    def done(title: str | None) -> None:
        if title is None:
            return
        try:
            changed = manager.rename(conv.id, title)
        except Exception as exc:
            notify(screen, str(exc), title="Not renamed", severity="error")
            return
        notify(screen, f"Renamed to {conversation_title(changed)}.")
        renamed(changed)

    question = f"A title for {conversation_title(conv)}:"
    screen.app.push_screen(AskTextScreen("Rename", question, conv.title), done)


def export_conversation(
    screen: KotoniaScreen[Any], manager: ConversationManager, conv: StoredConversation
) -> None:
    """Ask where, then write the conversation as a SillyTavern chat (the chat screen too)."""

    def done(path: Path | None) -> None:
        if path is None:
            return
        try:
            count = manager.export_file(conv.id, path)
        except Exception as exc:
            notify(screen, str(exc), title="Not exported", severity="error", timeout=15)
            return
        notify(screen, f"Wrote {plural(count, 'message')} to {path}.", title="Exported")

    name = safe_file_name(conversation_title(conv)) + ".jsonl"
    hint = "A SillyTavern chat (.jsonl): SillyTavern and `kotonia import` read it back."
    screen.app.push_screen(SaveFileScreen("Export the conversation", Path.cwd(), name, hint), done)


def safe_file_name(title: str) -> str:
    """A file name from a title: letters, digits, spaces, dots and dashes kept."""
    kept = "".join(ch if ch.isalnum() or ch in " .-_" else "_" for ch in title).strip(" .")
    return kept[:80] or "conversation"
