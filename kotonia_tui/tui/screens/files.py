"""File dialogs: pick a file to open (a picture, a chat to import) or a place to save one.

Both have a path box that completes from the file system (→ or Tab takes the suggestion) and a
folder tree showing only the kinds of file the dialog is for. File names are the user's but may
hold anything a file name can, so the tree shows them literally.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

from rich.text import Text, TextType
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.suggester import Suggester
from textual.widgets import Button, DirectoryTree, Input, Static

from kotonia_tui.tui.literal import literal, literal_cell, literal_line, notify

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp")
CHAT_SUFFIXES = (".jsonl", ".json")


class PathSuggester(Suggester):
    """Completes a path from the file system (folders, and files with one of `suffixes`)."""

    def __init__(self, suffixes: tuple[str, ...]) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.suffixes = suffixes

    async def get_suggestion(self, value: str) -> str | None:
        if not value:
            return None
        expanded = os.path.expanduser(value)
        folder, prefix = os.path.split(expanded)
        try:
            names = sorted(os.listdir(folder or "."))
        except OSError:
            return None
        for name in names:
            if not name.startswith(prefix) or name == prefix or name.startswith("."):
                continue
            full = os.path.join(folder, name)
            if os.path.isdir(full) or name.lower().endswith(self.suffixes):
                completed = value[: len(value) - len(prefix)] + name
                return completed + ("/" if os.path.isdir(full) else "")
        return None


class FileTree(DirectoryTree):
    """A folder tree with the files of the dialog's kinds (none: folders only)."""

    def __init__(self, path: Path, suffixes: tuple[str, ...], *, id: str | None = None) -> None:
        super().__init__(path, id=id)
        self.suffixes = suffixes

    def process_label(self, label: TextType) -> Text:
        return super().process_label(literal_cell(label) if isinstance(label, str) else label)

    def filter_paths(self, paths: Iterable[Path]) -> Iterable[Path]:
        return [
            p
            for p in paths
            if not p.name.startswith(".")
            and (p.is_dir() or (self.suffixes and p.suffix.lower() in self.suffixes))
        ]


class OpenFileScreen(ModalScreen[Path | str | None]):
    """Type a path or pick a file in the tree; returns the path, the id of an `extra` button
    pressed, or None (cancelled)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="file_cancel"),
    ]

    def __init__(
        self,
        title: str,
        start: Path,
        suffixes: tuple[str, ...],
        hint: str = "",
        *,
        action: str = "Open",
        extra: list[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__()
        self.dialog_title = title
        self.start = start
        self.suffixes = suffixes
        self.hint = hint
        self.action = action
        self.extra = extra or []

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide tall") as box:
            box.border_title = literal_line(self.dialog_title)
            yield Input(
                placeholder=f"a path (→ completes, Enter: {self.action.lower()})",
                suggester=PathSuggester(self.suffixes),
                id="file-path",
            )
            yield FileTree(self.start, self.suffixes, id="file-tree")
            yield Static(literal(self.hint), classes="hint")
            with Horizontal(classes="buttons"):
                yield Button(literal_line(self.action), variant="primary", id="open")
                for label, ident in self.extra:
                    yield Button(literal_line(label), variant="warning", id=ident)
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#file-path", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._open(event.value)

    def on_directory_tree_file_selected(self, event: DirectoryTree.FileSelected) -> None:
        self.dismiss(event.path)

    def _open(self, value: str) -> None:
        value = value.strip()
        if not value:
            notify(self, "type a path or pick a file", severity="warning")
            return
        path = Path(os.path.expanduser(value))
        if path.is_dir():
            self.query_one("#file-tree", FileTree).path = path
            return
        self.dismiss(path)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "open":
            self._open(self.query_one("#file-path", Input).value)
        elif event.button.id in {ident for _label, ident in self.extra}:
            self.dismiss(event.button.id)
        else:
            self.dismiss(None)


class SaveFileScreen(ModalScreen[Path | None]):
    """Where to write a file: the path box starts with a suggested name in `folder`; picking a
    folder in the tree moves the name there. Returns the path (None: cancelled)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="save_cancel"),
    ]

    def __init__(self, title: str, folder: Path, name: str, hint: str = "") -> None:
        super().__init__()
        self.dialog_title = title
        self.folder = folder
        self.file_name = name
        self.hint = hint

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide tall") as box:
            box.border_title = literal_line(self.dialog_title)
            yield Input(
                str(self.folder / self.file_name),
                placeholder="where to write it (Enter saves)",
                suggester=PathSuggester(()),
                id="file-path",
            )
            yield FileTree(self.folder, (), id="file-tree")
            yield Static(literal(self.hint), classes="hint")
            with Horizontal(classes="buttons"):
                yield Button("Save", variant="primary", id="save")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#file-path", Input).focus()

    def on_directory_tree_directory_selected(self, event: DirectoryTree.DirectorySelected) -> None:
        box = self.query_one("#file-path", Input)
        name = Path(box.value).name or self.file_name
        box.value = str(event.path / name)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._save(event.value)

    def _save(self, value: str) -> None:
        value = value.strip()
        if not value:
            notify(self, "type where to write the file", severity="warning")
            return
        path = Path(os.path.expanduser(value))
        if path.is_dir():
            notify(self, f"{path} is a folder: add a file name", severity="warning")
            return
        self.dismiss(path)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self._save(self.query_one("#file-path", Input).value)
        else:
            self.dismiss(None)
