"""The settings of a conversation and of its character, over the model profile.

Two columns of the same fields: this conversation, and the character (every conversation with
it); an empty field leaves the value to the layer below, and the third column says what is in
effect and which layer set it (the lore budget's base is the app's `lore_budget_ratio`).
Below: the Author's Note with its depth, and the World Info files to attach. Ctrl+S checks
everything and saves (a wrong value is named, with its bounds, and nothing is saved); the next
turn uses the new settings.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ValidationError
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, SelectionList, Static, TextArea

from kotonia_tui.chat.chat_settings import (
    GENERATION_FIELDS,
    LABELS,
    ChatSettingsError,
    Effective,
    SettingsView,
    lore_limit,
    reply_limit,
)
from kotonia_tui.chat.service import ChatService
from kotonia_tui.domain import MAX_AUTHOR_NOTE_DEPTH, ChatSettings, GenerationSettings
from kotonia_tui.terminal_text import visible
from kotonia_tui.tui.literal import literal, literal_line, notify

SCOPES = (("conversation", "conversation"), ("character", "character"))
INTEGER_FIELDS = {"top_k", "reply_max_tokens"}


def _shown(value: float | int | None) -> str:
    if value is None:
        return ""
    return f"{value:g}" if isinstance(value, float) else str(value)


def describe_error(label: str, exc: ValidationError) -> str:
    """A pydantic error as one line a player understands: the field, the bound, the value."""
    first = exc.errors()[0]
    ctx: dict[str, Any] = dict(first.get("ctx") or {})
    field = LABELS.get(str(first["loc"][-1]), str(first["loc"][-1])) if first["loc"] else ""
    bounds = {
        "greater_than_equal": "at least {ge}",
        "greater_than": "more than {gt}",
        "less_than_equal": "at most {le}",
        "less_than": "less than {lt}",
    }
    shown = {k: f"{v:g}" if isinstance(v, float) else v for k, v in ctx.items()}
    rule = bounds.get(first["type"], first["msg"]).format(**shown)
    return f"{field} ({label}): must be {rule}, got {first.get('input')!r}"


class ChatSettingsScreen(ModalScreen[bool]):
    """Returns True when the settings were saved."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "save", "Save", id="settings_save", priority=True),
        Binding("escape", "cancel", "Cancel", id="settings_cancel"),
    ]

    def __init__(self, service: ChatService, view: SettingsView) -> None:
        super().__init__()
        self.service = service
        self.view = view

    def _layer(self, scope: str) -> ChatSettings:
        return self.view.conversation if scope == "conversation" else self.view.character

    def compose(self) -> ComposeResult:
        view = self.view
        limit = reply_limit(view.n_ctx)
        with Vertical(classes="dialog wide tall", id="settings-dialog") as box:
            box.border_title = literal_line(
                f"Settings: {view.character_name} · conversation {view.conversation_id}"
            )
            box.border_subtitle = "Ctrl+S saves · Esc cancels"
            with VerticalScroll(id="settings-body"):
                yield Static(
                    literal(
                        f"Empty: the layer below decides (conversation, then character, then "
                        f"the profile {view.profile_name!r}). Reply length is also the reply "
                        f"reserve of every memory budget: at most {limit:,} in this "
                        f"{view.n_ctx:,}-token window. Lore budget: the tokens of lorebook "
                        f"entries sent each turn (0: none), at most {lore_limit(view.n_ctx):,}."
                    ),
                    classes="hint",
                )
                with Grid(id="settings-grid"):
                    yield Label("")
                    for _scope, title in SCOPES:
                        yield Label(Content.styled(title, "bold"))
                    yield Label(Content.styled("in effect", "bold"))
                    for name in GENERATION_FIELDS:
                        yield Label(LABELS[name])
                        for scope, _title in SCOPES:
                            value = getattr(self._layer(scope).generation, name)
                            yield Input(
                                _shown(value),
                                type="integer" if name in INTEGER_FIELDS else "number",
                                id=f"{scope}-{name}",
                                compact=True,
                            )
                        yield self._effective(name, view.effective.generation[name])
                    yield Label(LABELS["lore_budget"])
                    for scope, _title in SCOPES:
                        yield Input(
                            _shown(self._layer(scope).lore_budget),
                            type="integer",
                            id=f"{scope}-lore_budget",
                            compact=True,
                        )
                    yield self._effective("lore_budget", view.effective.lore_budget)
                yield Static(Content.styled("Author's Note", "bold $text-accent"), classes="hint")
                yield Static(
                    literal(
                        "Depth 0 puts it after the history, beside the other notes of the turn: "
                        "it costs only its own tokens. Depth N puts it N messages from the end: "
                        "it and the N messages after it are read again after each reply, while "
                        "you read (the prompt changes there). {{char}} and {{user}} are filled in."
                    ),
                    classes="hint",
                )
                for scope, title in SCOPES:
                    layer = self._layer(scope)
                    with Horizontal(classes="note-row"):
                        yield Label(Content(f"{title}, depth"), classes="note-label")
                        yield Input(
                            _shown(layer.author_note_depth),
                            type="integer",
                            id=f"{scope}-depth",
                            compact=True,
                            placeholder="0",
                        )
                    yield TextArea(
                        visible(layer.author_note), id=f"{scope}-note", classes="note-text"
                    )
                yield Static(
                    Content.assemble(
                        ("World Info", "bold $text-accent"),
                        literal_line(f"  (files in {view.world_folder})", "$text-muted"),
                    ),
                    classes="hint",
                )
                if not view.world_files:
                    yield Static(
                        literal(
                            "No World Info files yet: put SillyTavern lorebook .json files in "
                            "that folder to attach them here."
                        ),
                        classes="empty",
                    )
                for scope, title in SCOPES:
                    attached = set(self._layer(scope).world_info)
                    yield Label(Content(f"attached to {title}"))
                    yield SelectionList[str](
                        *(
                            (literal_line(name), name, name in attached)
                            for name in [
                                *view.world_files,
                                *sorted(attached - set(view.world_files)),
                            ]
                        ),
                        id=f"{scope}-world",
                        classes="world-list",
                    )
            yield Static(id="settings-error")
            with Horizontal(classes="buttons"):
                yield Button("Save", variant="primary", id="save")
                yield Button("Cancel", id="cancel")

    @staticmethod
    def _effective(name: str, effective: Effective) -> Label:
        return Label(
            Content.assemble(_shown(effective.value), (f" ({effective.layer})", "$text-muted")),
            id=f"effective-{name}",
        )

    def on_mount(self) -> None:
        self.query_one("#settings-error", Static).display = False
        self.query_one(f"#conversation-{GENERATION_FIELDS[0]}", Input).focus()

    # ---- reading the form -----------------------------------------------------------------

    def _read(self, scope: str, title: str) -> ChatSettings:
        values: dict[str, Any] = {}
        for name in GENERATION_FIELDS:
            text = self.query_one(f"#{scope}-{name}", Input).value.strip()
            if not text:
                continue
            try:
                values[name] = int(text) if name in INTEGER_FIELDS else float(text)
            except ValueError:
                kind = "a whole number" if name in INTEGER_FIELDS else "a number"
                raise ChatSettingsError(
                    name, f"{LABELS[name]} ({title}): not {kind}: {text!r}"
                ) from None
        try:
            generation = GenerationSettings.model_validate(values)
        except ValidationError as exc:
            field = str(exc.errors()[0]["loc"][-1])
            raise ChatSettingsError(field, describe_error(title, exc)) from exc
        lore_text = self.query_one(f"#{scope}-lore_budget", Input).value.strip()
        lore_budget = int(lore_text) if lore_text.lstrip("-").isdigit() else None
        if lore_text and (lore_budget is None or lore_budget < 0):
            raise ChatSettingsError(
                "lore_budget",
                f"lore budget ({title}): must be a whole number of tokens, 0 or more, "
                f"got {lore_text!r}",
            )
        depth_text = self.query_one(f"#{scope}-depth", Input).value.strip()
        depth = int(depth_text) if depth_text.lstrip("-").isdigit() else None
        if depth_text and (depth is None or not 0 <= depth <= MAX_AUTHOR_NOTE_DEPTH):
            raise ChatSettingsError(
                "depth",
                f"Author's Note depth ({title}): must be a whole number from 0 to "
                f"{MAX_AUTHOR_NOTE_DEPTH}, got {depth_text!r}",
            )
        note = self.query_one(f"#{scope}-note", TextArea).text
        original = self._layer(scope).author_note
        world = self.query_one(f"#{scope}-world", SelectionList)
        return ChatSettings(
            generation=generation,
            # Shown with control characters as pictures; unchanged, the stored text stays.
            author_note=original if note == visible(original) else note,
            author_note_depth=depth,
            world_info=tuple(str(name) for name in world.selected),
            lore_budget=lore_budget,
        )

    def action_save(self) -> None:
        error = self.query_one("#settings-error", Static)
        try:
            conversation = self._read("conversation", "conversation")
            character = self._read("character", "character")
            self.service.save_settings(self.view.conversation_id, character, conversation)
        except ChatSettingsError as exc:
            error.update(literal(str(exc), "bold $error"))
            error.display = True
            notify(self, str(exc), title="Not saved", severity="error", timeout=10)
            return
        except Exception as exc:  # the store (a full disk, a locked file)
            notify(self, str(exc), title="Not saved", severity="error", timeout=10)
            return
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "save":
            self.action_save()
        else:
            self.action_cancel()
