"""Personas: who you play. Make, edit, delete them, choose the default, or pick one for a
conversation (then the screen returns the id of the one picked)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import (
    Button,
    Footer,
    Header,
    Input,
    Label,
    ListItem,
    ListView,
    Static,
    TextArea,
)

from kotonia_tui.characters.card import CardImage
from kotonia_tui.chat.personas import KEEP, PersonaBook
from kotonia_tui.domain import StoredPersona
from kotonia_tui.terminal_text import visible
from kotonia_tui.tui.literal import literal, literal_line, notify
from kotonia_tui.tui.render import plural, short_text
from kotonia_tui.tui.screens.base import KotoniaScreen
from kotonia_tui.tui.screens.dialogs import ConfirmScreen
from kotonia_tui.tui.screens.files import IMAGE_SUFFIXES, PathSuggester
from kotonia_tui.tui.widgets.portrait import Portrait
from kotonia_tui.tui.widgets.status import StatusLine

# What a change to a persona means for the conversations played as it (said where it happens).
CHANGE_NOTE = (
    "Conversations played as this persona use the new name and description from their next "
    "turn: {{user}} in the character's setup becomes the new name, so that turn reads the "
    "whole prompt again (slower once). Messages and memory already written keep their names."
)


def persona_change_note(name: str) -> str:
    """What playing a conversation as another persona means, asked before it is done."""
    return (
        f"Play this conversation as {name} from now on?\n\n"
        f"{{{{user}}}} in the character's setup becomes {name} (and the persona's description "
        "changes with it), so the next reply reads the whole prompt again: slower once. "
        "Messages and memory already written keep the names they were written with."
    )


SHORT_CHANGE_NOTE = "Its conversations follow from their next turn (read again once)."


class PersonaItem(ListItem):
    def __init__(self, persona: StoredPersona, uses: int) -> None:
        mark = "★ " if persona.is_default else ""
        label = Content.assemble(
            (mark, "bold $warning"),
            literal_line(persona.name, "bold"),
            (f"  {plural(uses, 'conversation')}", "$text-muted"),
            "\n",
            literal_line(short_text(persona.description, 60) or "(no description)", "$text-muted"),
        )
        super().__init__(Label(label))
        self.persona = persona
        self.uses = uses


class PersonasScreen(KotoniaScreen[int | None]):
    """The personas; with `choosing_for`, Enter picks one for that and returns its id."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", id="personas_back"),
        Binding("n", "new", "New persona", id="persona_new"),
        Binding("e", "edit", "Edit", id="persona_edit"),
        Binding("s", "make_default", "Make default", id="persona_default"),
        Binding("delete,d", "delete", "Delete", id="persona_delete"),
    ]
    FOOTER_FIRST = frozenset({"personas_back", "persona_new", "persona_edit", "quit", "help"})

    def __init__(self, choosing_for: str = "", current: int | None = None) -> None:
        super().__init__()
        self.choosing_for = choosing_for
        self.current = current
        self.book: PersonaBook | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="personas"):
            with Vertical(id="persona-list-box") as box:
                box.border_title = "Personas"
                yield ListView(id="persona-list")
            with VerticalScroll(id="persona-detail") as detail:
                detail.border_title = "About"
                with Horizontal(id="persona-top"):
                    yield Vertical(id="persona-portrait")
                    yield Static(id="persona-heading")
                yield Static(id="persona-description")
        yield StatusLine()
        yield Footer()

    def on_mount(self) -> None:
        self.title = "Personas"
        self.sub_title = (
            f"choose who you play in {self.choosing_for}" if self.choosing_for else "who you play"
        )
        self.load()

    @work(exclusive=True, group="personas")
    async def load(self, select: int | None = None) -> None:
        manager = await self.kotonia.wait_manager()
        if manager is None:
            notify(self, "The personas cannot be read; see the error above.", severity="error")
            return
        self.book = manager.personas
        await self._fill(select if select is not None else self.current)

    async def _fill(self, select: int | None) -> None:
        assert self.book is not None
        personas = self.book.all()
        listing = self.query_one("#persona-list", ListView)
        await listing.clear()
        await listing.extend(PersonaItem(p, self.book.uses(p.id)) for p in personas)
        ids = [p.id for p in personas]
        default = next((p.id for p in personas if p.is_default), ids[0])
        listing.index = ids.index(select) if select in ids else ids.index(default)
        listing.focus()
        self._show(personas[listing.index or 0])

    def _selected(self) -> PersonaItem | None:
        item = self.query_one("#persona-list", ListView).highlighted_child
        return item if isinstance(item, PersonaItem) else None

    def on_list_view_highlighted(self, event: ListView.Highlighted) -> None:
        if isinstance(event.item, PersonaItem):
            self._show(event.item.persona)

    def on_list_view_selected(self, event: ListView.Selected) -> None:
        if not isinstance(event.item, PersonaItem):
            return
        if self.choosing_for:
            self.dismiss(event.item.persona.id)
        else:
            self.action_edit()

    def _show(self, persona: StoredPersona) -> None:
        assert self.book is not None
        slot = self.query_one("#persona-portrait", Vertical)
        slot.remove_children()
        picture = self.book.picture(persona)
        image = CardImage(data=picture[0], mime=picture[1]) if picture else None
        slot.mount(Portrait(image, persona.name, classes="small"))
        uses = self.book.uses(persona.id)
        facts = [plural(uses, "conversation")]
        if persona.is_default:
            facts.insert(0, "default")
        hint = (
            f"Enter: play {self.choosing_for} as {visible(persona.name, one_line=True)}"
            if self.choosing_for
            else "Enter edits"
        )
        self.query_one("#persona-heading", Static).update(
            Content.assemble(
                literal_line(persona.name, "bold $accent"),
                "\n",
                (" · ".join(facts), "$text-muted"),
                "\n\n",
                literal_line(hint, "$text-disabled"),
            )
        )
        self.query_one("#persona-description", Static).update(
            literal(persona.description)
            if persona.description
            else Content.styled("(no description)", "italic $text-muted")
        )

    # ---- actions ----------------------------------------------------------------------------

    def action_back(self) -> None:
        self.dismiss(None)

    def action_new(self) -> None:
        book = self.book
        if book is None:
            return

        def save(name: str, description: str, picture: Path | str | None) -> StoredPersona:
            return book.create(name, description, picture if isinstance(picture, Path) else None)

        self.app.push_screen(PersonaEditScreen(None, save), self._saved)

    def action_edit(self) -> None:
        item, book = self._selected(), self.book
        if item is None or book is None:
            return
        persona = item.persona

        def save(name: str, description: str, picture: Path | str | None) -> StoredPersona:
            return book.update(persona.id, name, description, picture)

        self.app.push_screen(PersonaEditScreen(persona, save, item.uses), self._saved)

    def _saved(self, persona: StoredPersona | None) -> None:
        if persona is not None:
            self.load(persona.id)
            notify(self, f"Saved {persona.name}.")

    def action_make_default(self) -> None:
        item, book = self._selected(), self.book
        if item is None or book is None:
            return
        book.make_default(item.persona.id)
        notify(self, f"{item.persona.name} is the default: new conversations are played as it.")
        self.load(item.persona.id)

    def action_delete(self) -> None:
        item, book = self._selected(), self.book
        if item is None or book is None:
            return
        persona = item.persona
        if persona.is_default:
            notify(
                self,
                f"{persona.name} is the default persona: make another one the default first (s).",
                severity="warning",
            )
            return

        def done(yes: bool | None) -> None:
            if not yes or book is None:
                return
            try:
                book.delete(persona.id)
            except Exception as exc:
                notify(self, str(exc), title="Not deleted", severity="error")
                return
            notify(self, f"Deleted the persona {persona.name}.")
            self.load()

        uses = (
            f"\n\nIts {plural(item.uses, 'conversation')} keep its name and description and go "
            "on as they are."
            if item.uses
            else ""
        )
        self.app.push_screen(ConfirmScreen(f"Delete the persona {persona.name}?{uses}"), done)


SaveDraft = Callable[[str, str, Path | str | None], StoredPersona]


class PersonaEditScreen(ModalScreen[StoredPersona | None]):
    """A persona's name, description and picture. Ctrl+S saves; Esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "save", "Save", id="persona_save", priority=True),
        Binding("escape", "cancel", "Cancel", id="persona_cancel"),
    ]

    def __init__(self, persona: StoredPersona | None, save: SaveDraft, uses: int = 0) -> None:
        super().__init__()
        self.persona = persona
        self.save = save
        self.uses = uses
        self.remove_picture = False

    def compose(self) -> ComposeResult:
        persona = self.persona
        with Vertical(classes="dialog wide") as box:
            box.border_title = literal_line(f"Edit {persona.name}") if persona else "New persona"
            # At 24 rows the labels give way to the placeholders, the note to its short form.
            yield Label("Name", classes="field-label")
            yield Input(
                visible(persona.name, one_line=True) if persona else "",
                placeholder="Name",
                id="persona-name",
            )
            yield Label(
                "Description (who you are in the story; {{user}} is your name)",
                classes="field-label",
            )
            yield TextArea(
                visible(persona.description) if persona else "",
                id="persona-description-text",
                soft_wrap=True,
                placeholder="Description (who you are in the story)",
            )
            yield Label("Picture (optional)", classes="field-label")
            yield Input(
                placeholder="a picture file (→ completes); empty keeps the one it has",
                suggester=PathSuggester(IMAGE_SUFFIXES),
                id="persona-picture",
            )
            changes = persona is not None and self.uses > 0
            note = CHANGE_NOTE if changes else ""
            yield Static(
                literal(f"{note}\nCtrl+S saves · Esc cancels".strip()), classes="hint long"
            )
            short = SHORT_CHANGE_NOTE if changes else ""
            yield Static(literal(f"{short} Ctrl+S saves.".strip()), classes="hint short")
            with Horizontal(classes="buttons"):
                yield Button("Save", variant="primary", id="save")
                if persona is not None and persona.image:
                    yield Button("Remove picture", variant="warning", id="remove-picture")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#persona-name", Input).focus()

    def action_save(self) -> None:
        name = self.query_one("#persona-name", Input).value
        description = self.query_one("#persona-description-text", TextArea).text
        persona = self.persona
        # The boxes hold the text as shown (control characters as pictures): left as shown,
        # a field keeps its exact stored text.
        if persona is not None and name == visible(persona.name, one_line=True):
            name = persona.name
        if persona is not None and description == visible(persona.description):
            description = persona.description
        typed = self.query_one("#persona-picture", Input).value.strip()
        picture: Path | str | None
        if typed:
            picture = Path(typed).expanduser()
        elif self.remove_picture:
            picture = None
        else:
            picture = KEEP
        try:
            saved = self.save(name, description, picture)
        except Exception as exc:  # a name taken, a file that is not a picture: say it, stay
            notify(self, str(exc), title="Not saved", severity="error", timeout=10)
            return
        self.dismiss(saved)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_save()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        elif event.button.id == "remove-picture":
            self.remove_picture = True
            event.button.disabled = True
            notify(self, "The picture goes when you save.")
        else:
            self.action_cancel()
