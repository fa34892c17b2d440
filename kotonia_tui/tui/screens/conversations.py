"""One character's conversations: resume one, or start a new one with a chosen greeting."""

from __future__ import annotations

from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Footer, Header, Label, ListItem, ListView, LoadingIndicator, Static

from kotonia_tui.characters.card import CharacterCard
from kotonia_tui.domain import Role, StoredConversation
from kotonia_tui.terminal_text import visible
from kotonia_tui.tui.literal import literal, literal_line
from kotonia_tui.tui.render import age, fill_macros, message_body, plural, short_text
from kotonia_tui.tui.screens.base import KotoniaScreen
from kotonia_tui.tui.widgets.portrait import Portrait
from kotonia_tui.tui.widgets.status import StatusLine

GREETINGS_AT_ONCE = 25  # rows mounted per batch (about 5 ms each)


class ConversationItem(ListItem):
    def __init__(self, conv: StoredConversation, preview: str) -> None:
        title = conv.title or f"Conversation {conv.id}"
        label = Content.assemble(
            literal_line(title, "bold"),
            (
                f"  #{conv.id} · {plural(conv.message_count, 'message')} · {age(conv.updated_at)}",
                "$text-muted",
            ),
            "\n",
            literal_line(short_text(preview, 80) or "(no messages)", "$text-muted"),
        )
        super().__init__(Label(label))
        self.conversation = conv


class GreetingItem(ListItem):
    def __init__(self, index: int, text: str) -> None:
        name = "First message" if index == 0 else f"Alternate greeting {index}"
        label = Content.assemble(
            (name, "bold"), "\n", literal_line(short_text(text, 80), "$text-muted")
        )
        super().__init__(Label(label))
        self.index = index
        self.text = text


class ConversationsScreen(KotoniaScreen[None]):
    """Resume or start."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Characters", id="back_to_characters"),
        Binding("n", "focus_greetings", "New conversation", id="new_conversation"),
    ]

    def __init__(self, card: CharacterCard) -> None:
        super().__init__()
        self.card = card
        self._loaded = False

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
        yield StatusLine()
        yield Footer()

    def on_mount(self) -> None:
        self.title = visible(self.card.display_name, one_line=True)
        self.sub_title = "conversations"
        user = self.kotonia.settings.persona.name
        greetings = [g for g in [self.card.first_mes, *self.card.alternate_greetings] if g]
        listing = self.query_one("#greeting-list", ListView)
        if greetings:
            items = [
                GreetingItem(i, fill_macros(g, self.card.name, user))
                for i, g in enumerate(greetings)
            ]
            listing.extend(items[:GREETINGS_AT_ONCE])
            if len(items) > GREETINGS_AT_ONCE:
                self._mount_more_greetings(items[GREETINGS_AT_ONCE:])
        else:
            listing.append(GreetingItem(0, "(this card has no greeting: you speak first)"))
        listing.index = 0
        self.query_one("#conv-list", ListView).display = False
        self.query_one("#conv-empty", Static).display = False
        self.load_conversations()

    def on_screen_resume(self) -> None:
        # Back from a chat: its new messages change the list (counts, previews, order).
        if self._loaded:
            self.load_conversations()

    @work(exclusive=True, group="conversations")
    async def load_conversations(self) -> None:
        reader = await self.kotonia.wait_reader()
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
        await listing.clear()
        for conv in convs:
            last = reader.messages(conv.id, limit=1)
            preview = f"{last[-1].speaker}: {last[-1].text}" if last else ""
            await listing.append(ConversationItem(conv, preview))
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
            listing.index = min(previous or 0, len(convs) - 1)
            listing.focus()
        else:
            self.query_one("#greeting-list", ListView).focus()

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
            self.kotonia.start_conversation(self.card, item.index)
