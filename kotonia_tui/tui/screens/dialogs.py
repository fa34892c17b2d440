"""Modal dialogs: edit a message, confirm a deletion, attach an image, read a chapter."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static, TextArea

from kotonia_tui.chat.inspection import MemoryView
from kotonia_tui.chat.numbering import evidence_said
from kotonia_tui.domain import Chapter, Message, StoredLedgerEntry, StoredMessage, Synopsis
from kotonia_tui.memory.structured import dropped_of
from kotonia_tui.terminal_text import visible
from kotonia_tui.tui.literal import literal, literal_cell, literal_line
from kotonia_tui.tui.render import age, message_body, tokens
from kotonia_tui.tui.screens.files import IMAGE_SUFFIXES, OpenFileScreen


class EditScreen(ModalScreen[str | None]):
    """Edit a message's text. Ctrl+S saves, Esc cancels; None when nothing changed.

    The editor holds the text as shown everywhere else (control characters as pictures, ␛):
    a raw escape sequence in an editor would reach the terminal. Saved unchanged, the message
    keeps its exact text; edited, it keeps what the editor shows.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "save", "Save", id="edit_save", priority=True),
        Binding("escape", "cancel", "Cancel", id="edit_cancel"),
    ]

    def __init__(self, message: Message, label: str = "") -> None:
        super().__init__()
        self.message = message
        self.label = label or "this message"
        self.shown = visible(message.text)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide") as box:
            box.border_title = literal_line(f"Edit message {self.label} ({self.message.speaker})")
            yield TextArea(self.shown, id="edit-text", soft_wrap=True)
            yield Static(
                "An edit inside a folded range re-folds that chapter.  Ctrl+S saves · Esc cancels",
                classes="hint",
            )
            with Horizontal(classes="buttons"):
                yield Button("Save", variant="primary", id="save")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#edit-text", TextArea).focus()

    def action_save(self) -> None:
        text = self.query_one("#edit-text", TextArea).text
        self.dismiss(None if text == self.shown else text)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.action_cancel()


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", id="confirm_yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm_no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as box:
            box.border_title = "Confirm"
            yield Static(literal(self.question))
            with Horizontal(classes="buttons"):
                yield Button("Yes (y)", variant="error", id="yes")
                yield Button("No (n)", id="no")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class AttachScreen(OpenFileScreen):
    """Type a path (Tab or → completes) or pick a file in the tree. Returns "clear" to detach."""

    def __init__(self, start: Path, attached: int = 0, vision: bool = True) -> None:
        notes = []
        if not vision:
            notes.append(
                "This model has no image projector (mmproj): the image is stored with the "
                "message, but the model will not see it."
            )
        if attached:
            notes.append(f"{attached} image(s) attached to the next message.")
        super().__init__(
            "Attach an image",
            start,
            IMAGE_SUFFIXES,
            "\n".join(notes),
            action="Attach",
            extra=[("Remove attached", "clear")] if attached else [],
        )


class TextScreen(ModalScreen[None]):
    """A read-only page: a chapter with its source messages, or the synopsis versions."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "Close", id="close_page"),
    ]

    def __init__(self, title: str, blocks: list[Content]) -> None:
        super().__init__()
        self.page_title = title
        self.blocks = blocks

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide tall") as box:
            box.border_title = literal_line(self.page_title)
            box.border_subtitle = "Esc closes"
            with VerticalScroll(id="page"):
                for block in self.blocks:
                    yield Static(block, classes="page-block")

    def on_mount(self) -> None:
        self.query_one("#page").focus()

    def action_close(self) -> None:
        self.dismiss(None)


def message_block(number: int, message: Message) -> Content:
    """A message on a page: its number in the conversation, its speaker, its text."""
    return Content.assemble(
        (f"#{number} ", "bold"),
        literal_line(message.speaker, "bold"),
        "\n",
        message_body(message.text, message.role),
    )


def chapter_origin(chapter: Chapter) -> str:
    """Where a chapter's text comes from, in words."""
    if chapter.quoted:
        return "origin: quoted from the range's own lines (the chronicler's answer was unusable)"
    made = [part for part in (chapter.model, f"{chapter.gen_ms / 1000:.1f} s") if part]
    if not chapter.gen_ms:
        made = made[:1] if chapter.model else []
    said = f" ({', '.join(made)})" if made else ""
    kind = ", as structured items with their evidence" if chapter.structure else ""
    return f"origin: written by the chronicler{said}{kind}"


def chapter_page(
    chapter: Chapter,
    source: Sequence[Message],
    applied: bool,
    memory: MemoryView,
    first_number: int,
) -> TextScreen:
    """A chapter, then the messages it summarizes, numbered in their conversation."""
    state = "applied" if applied else "landed: applied on the next turn"
    if chapter.in_synopsis:
        state = "folded into the synopsis"
    span = memory.chapter_span(chapter.id)
    head = Content.assemble(
        (f"messages {span}", "bold"),
        (f" ({len(source)} messages)" if source else "", "$text-muted"),
        (f" · {age(chapter.created_at)} · {tokens(chapter.tokens)} · {state}", "$text-muted"),
        (" · stale (an edit inside; re-folding)" if chapter.stale else "", "bold $error"),
        literal(f"\n{chapter_origin(chapter)}", "$text-muted"),
        # As the memory block heads the chapter: a temporal question is answered from it.
        literal(f"\nin-story time: {chapter.story_time}" if chapter.story_time else ""),
        literal(f"\n{chapter.note}" if chapter.note else "", "$text-muted"),
        *(
            literal(f"\nleft out of the answer ({d.field}): {d.text} ({d.reason})", "$warning")
            for d in dropped_of(chapter.structure)
        ),
    )
    blocks = [
        head,
        literal(chapter.text),
        Content.styled("Source messages", "bold $text-accent"),
    ]
    blocks.extend(
        message_block(first_number + index, message) for index, message in enumerate(source)
    )
    if not source:
        blocks.append(Content.styled("(the source messages were deleted)", "italic $text-muted"))
    return TextScreen(f"Chapter {span}", blocks)


def ledger_page(
    entry: StoredLedgerEntry,
    evidence: Sequence[StoredMessage],
    numbers: dict[int, int],
    memory: MemoryView,
) -> TextScreen:
    """A ledger entry, how long it holds (its chapters named as the inspector names them),
    then the messages it rests on: `evidence`, those still stored, and `numbers` their places
    (chat/numbering.py `cited_numbers` of the entry's evidence); one deleted since is said in
    words, as the inspector's line says it."""
    written = memory.chapter_span(entry.chapter_id)
    if entry.ended_by_chapter_id is None:
        validity = f"valid from {written} · in the prompt"
    elif entry.retired_with_its_chapter:
        validity = f"valid from {written} · retired with it; no longer in the prompt"
    else:
        how = entry.end.value if entry.end else "ended"
        validity = (
            f"valid from {written} to {memory.chapter_span(entry.ended_by_chapter_id)} · "
            f"{how}; no longer in the prompt"
        )
    blocks = [
        Content.assemble(
            (entry.kind.label, "bold"),
            literal_line(f" · {entry.subject}" if entry.subject else "", "$text-muted"),
            (f" · {validity}", "$text-muted"),
        ),
        literal(entry.text),
    ]
    if entry.end_note:
        blocks.append(literal(f"{entry.end.value if entry.end else 'ended'}: {entry.end_note}"))
    cited = evidence_said(numbers.get(i) for i in entry.evidence) or "it cites no message"
    blocks.append(
        Content.assemble(("Evidence", "bold $text-accent"), (f" · {cited}", "$text-muted"))
    )
    blocks.extend(message_block(numbers[m.id], m) for m in evidence if m.id in numbers)
    return TextScreen(f"Ledger {entry.label}", blocks)


def synopsis_page(versions: Sequence[Synopsis], memory: MemoryView) -> TextScreen:
    blocks: list[Content] = []
    for synopsis in reversed(versions):
        blocks.append(
            Content.assemble(
                (f"Version {synopsis.version}", "bold $accent"),
                (" (current)" if synopsis.current else "", "bold"),
                (
                    f" · through {memory.number(synopsis.through_message_id)}"
                    f" · {tokens(synopsis.tokens)} · {age(synopsis.created_at)}\n",
                    "$text-muted",
                ),
                literal(synopsis.text),
                *(
                    literal(
                        f"\nleft out of the draft (it rests on nothing it folds): {s}", "$warning"
                    )
                    for s in synopsis.dropped
                ),
            )
        )
    return TextScreen("Synopsis versions", blocks or [Content("no synopsis yet")])


class HelpScreen(ModalScreen[None]):
    """Every binding: its keys, what it does, its id (for `keys` in the settings), and where."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,f1,q", "close", "Close", id="close_help"),
    ]

    def __init__(self, rows: list[tuple[str, str, str, str]]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        from textual.widgets import DataTable

        with Vertical(classes="dialog wide tall") as box:
            box.border_title = "Keys"
            box.border_subtitle = literal_line(
                "remap any id under [keys] in config.toml · Esc closes"
            )
            # A Static, not a Label: it wraps instead of cutting the line at the dialog's edge.
            yield Static(
                literal(
                    "Enter sends (on an empty box: the character answers your last message); "
                    "Shift+Enter (where the terminal reports it), Alt+Enter or Ctrl+J start a "
                    "new line. On an empty box, ← and → page through the last reply's versions "
                    "(→ on the newest writes another) and Ctrl+Z brings back a deleted message. "
                    "Ctrl+P opens the command palette. Ctrl+F searches every "
                    "conversation (words in English, any part in Japanese and Chinese). "
                    "Expressions: a card with expression pictures shows, beside the chat, the "
                    "one the last reply calls for: the word closest to the reply's end that "
                    "names an expression or a mood (smiles → joy or happy, tears → sad, "
                    "glares → angry, 笑 → joy, …); with none, neutral. In a group the "
                    "picture is the last speaker's own."
                ),
                classes="hint",
            )
            table: DataTable[str] = DataTable(
                id="help-table", cursor_type="row", zebra_stripes=True
            )
            yield table

    def on_mount(self) -> None:
        from textual.widgets import DataTable

        table = self.query_one("#help-table", DataTable)
        table.add_columns("Keys", "Action", "Id", "Where")
        for row in self.rows:
            table.add_row(*(literal_cell(cell) for cell in row))
        table.focus()

    def action_close(self) -> None:
        self.dismiss(None)
