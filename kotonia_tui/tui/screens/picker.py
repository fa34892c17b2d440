"""The character picker: every card from the shipped and the user's folders, with its picture."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Footer, Header, Label, ListItem, ListView, Static

from kotonia_tui.characters.card import CharacterCard
from kotonia_tui.tui.literal import literal, literal_line, notify
from kotonia_tui.tui.render import fill_macros, plural, short_text
from kotonia_tui.tui.screens.base import KotoniaScreen
from kotonia_tui.tui.screens.personas import PersonasScreen
from kotonia_tui.tui.widgets.portrait import Portrait
from kotonia_tui.tui.widgets.status import StatusLine


def first_paragraph(text: str) -> str:
    return text.replace("\r\n", "\n").strip().split("\n\n", 1)[0].strip()


class CardItem(ListItem):
    def __init__(self, card: CharacterCard, user: str) -> None:
        description = fill_macros(card.description, card.name, user)
        label = Content.assemble(
            literal_line(card.display_name, "bold"),
            literal_line(f"  {card.key}" if card.display_name != card.key else "", "$text-muted"),
            "\n",
            literal_line(short_text(description, 40) or "no description", "$text-muted"),
        )
        super().__init__(Label(label))
        self.card = card
        self.label = label
        self.marked = False  # chosen for a group (Space), in the order marked

    def mark(self, marked: bool) -> None:
        self.marked = marked
        shown = Content.assemble("✓ ", self.label) if marked else self.label
        self.query_one(Label).update(shown)


class PickerScreen(KotoniaScreen[None]):
    """Pick who to talk with."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "choose", "Choose", id="choose_character", show=True),
        Binding("ctrl+l", "reload", "Reload cards", id="reload_cards"),
        Binding("f5", "personas", "Personas", id="personas"),
        # Group chats (issue 31): mark several cards, then start one conversation with them all.
        Binding("space", "mark", "Mark for a group", id="mark_for_group", show=False),
        Binding("ctrl+g", "start_group", "Start a group", id="start_group", show=False),
    ]

    def __init__(
        self, cards: list[CharacterCard], problems: list[str], repairs: list[str] | None = None
    ) -> None:
        super().__init__()
        self.cards = cards
        self.problems = problems
        self.repairs = repairs or []  # cards read with a repair: listed, and said so
        self.marked: list[CharacterCard] = []  # in the order marked: the group's cast order

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="picker"):
            with Vertical(id="card-list-box") as box:
                box.border_title = "Characters"
                yield ListView(id="card-list")
                yield Static(id="card-list-empty", classes="empty")
                with VerticalScroll(id="card-problems"):  # scrolls when many cards are broken
                    yield Static(id="card-problems-text")
            with VerticalScroll(id="card-detail") as detail:
                detail.border_title = "About"
                with Horizontal(id="card-top"):
                    yield Vertical(id="portrait-slot")
                    yield Static(id="card-heading")
                yield Static(id="card-description")
                yield Static(id="card-notes")
        yield StatusLine()
        yield Footer()

    def on_mount(self) -> None:
        self.title = "Kotonia"
        self.sub_title = "choose a character"
        self._fill()

    def _fill(self) -> None:
        listing = self.query_one("#card-list", ListView)
        listing.clear()
        user = self.kotonia.user_name()
        listing.extend(CardItem(card, user) for card in self.cards)
        empty = self.query_one("#card-list-empty", Static)
        folder = self.kotonia.user_characters_dir
        empty.update(
            literal(
                f"No character cards found.\n\nPut PNG, JSON or CHARX cards in\n{folder}\n"
                "and press Ctrl+L to reload."
            )
        )
        empty.display = not self.cards
        listing.display = bool(self.cards)
        if self.cards:
            listing.index = 0
            listing.focus()
            self._show(self.cards[0])
        self._show_problems()

    def _show_problems(self) -> None:
        """Broken cards stay listed under the cards until the next reload (a toast alone
        expires while the player is still reading the screen), and so do the cards read with a
        repair, apart: those are listed above and can be chosen."""
        box = self.query_one("#card-problems", VerticalScroll)
        box.display = bool(self.problems or self.repairs)
        if not (self.problems or self.repairs):
            return
        lines: list[Content] = []
        if self.problems:
            lines.append(
                literal_line(
                    f"⚠ {plural(len(self.problems), 'card')} could not be read (Ctrl+L reloads):",
                    "bold $warning",
                )
            )
            lines.extend(literal(problem, "$warning") for problem in self.problems)
        if self.repairs:
            lines.append(
                literal_line(
                    f"⚠ {plural(len(self.repairs), 'card')} read with a repair:", "bold $warning"
                )
            )
            lines.extend(literal(repair, "$warning") for repair in self.repairs)
        self.query_one("#card-problems-text", Static).update(Content("\n").join(lines))
        for problem in self.problems:
            notify(self, problem, title="A card could not be read", severity="warning", timeout=20)
        for repair in self.repairs:
            notify(self, repair, title="A card was read with a repair", severity="warning")

    def on_list_view_highlighted(self, event: ListView.Highlighted) -> None:
        if isinstance(event.item, CardItem):
            self._show(event.item.card)

    def on_list_view_selected(self, event: ListView.Selected) -> None:
        if isinstance(event.item, CardItem):
            self.kotonia.open_character(event.item.card)

    def action_choose(self) -> None:
        listing = self.query_one("#card-list", ListView)
        item = listing.highlighted_child
        if isinstance(item, CardItem):
            self.kotonia.open_character(item.card)

    def action_mark(self) -> None:
        listing = self.query_one("#card-list", ListView)
        item = listing.highlighted_child
        if not isinstance(item, CardItem):
            return
        item.mark(not item.marked)
        if item.marked:
            self.marked.append(item.card)
        else:
            self.marked = [c for c in self.marked if c.key != item.card.key]
        names = ", ".join(c.display_name for c in self.marked)
        if names:
            notify(self, f"For a group: {names} (Ctrl+G starts it).")

    def action_start_group(self) -> None:
        if len(self.marked) < 2:
            notify(self, "Mark two cards or more with Space, then Ctrl+G starts the group.")
            return
        self.kotonia.start_group(list(self.marked))

    def action_personas(self) -> None:
        self.app.push_screen(PersonasScreen())

    def action_reload(self) -> None:
        self.cards, self.problems, self.repairs = self.kotonia.load_cards()
        self._fill()
        notify(self, plural(len(self.cards), "card"))

    def _show(self, card: CharacterCard) -> None:
        user = self.kotonia.user_name()
        slot = self.query_one("#portrait-slot", Vertical)
        slot.remove_children()
        slot.mount(Portrait(card.image, card.display_name))
        greetings = (1 if card.first_mes else 0) + len(card.alternate_greetings)
        facts = [plural(greetings, "greeting")]
        if card.character_book is not None and card.character_book.entries:
            facts.append(plural(len(card.character_book.entries), "lorebook entry"))
        note = card.character_note  # as SillyTavern reads it (a repair is listed apart)
        if note is not None:
            # Where it goes, not what it says: like the description, it may give the story away
            # (the inspector, F2, shows its text in a chat).
            facts.append(f"Character's Note at depth {note.depth} ({note.role})")
        if card.creator:
            facts.append(f"by {card.creator}")
        heading = Content.assemble(
            literal_line(card.name, "bold $accent"),
            "\n" if card.nickname and card.nickname != card.name else "",
            literal_line(
                f"“{card.nickname}”" if card.nickname and card.nickname != card.name else "",
                "italic",
            ),
            "\n",
            literal_line(" · ".join(facts), "$text-muted"),
            "\n" if card.tags else "",
            literal_line(", ".join(card.tags), "$secondary"),
            ("\n\nEnter to choose", "$text-disabled"),
        )
        self.query_one("#card-heading", Static).update(heading)
        # A short description: a card's full text often holds what the player should find out
        # in the story (secrets, the truth behind a lie), so only the opening is shown, and
        # only the first paragraph of the creator's notes (spoilers conventionally follow).
        description = first_paragraph(fill_macros(card.description, card.name, user))
        self.query_one("#card-description", Static).update(
            literal(short_text(description, 320))
            if description
            else Content.styled("(no description)", "italic")
        )
        notes = first_paragraph(fill_macros(card.creator_notes, card.name, user))
        notes_widget = self.query_one("#card-notes", Static)
        notes_widget.update(literal(short_text(notes, 400), "italic $text-muted"))
        notes_widget.display = bool(notes)
