"""The Kotonia TUI application: loading the model, the screens, the status line, the theme.

Flow: the character picker opens at once (cards are read without the model) while the model
loads in a thread worker; the conversation list and the chat wait for it. The chat service's
events arrive on the asyncio loop and are posted as Textual messages.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from pathlib import Path
from typing import ClassVar, assert_never

from textual import work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.reactive import var
from textual.screen import Screen

from kotonia_tui.characters.card import CharacterCard
from kotonia_tui.chat.bootstrap import open_library, open_service, open_store
from kotonia_tui.chat.events import (
    FoldProgress,
    FoldState,
    FoldWait,
    MemoryNotice,
    NoticeLevel,
    RunningFold,
    ServiceEvent,
    TurnPrepared,
)
from kotonia_tui.chat.managing import ConversationManager
from kotonia_tui.chat.personas import PersonaBook
from kotonia_tui.chat.reader import ConversationReader
from kotonia_tui.chat.service import ChatService
from kotonia_tui.config import Settings, app_dirs
from kotonia_tui.domain import StoredConversation
from kotonia_tui.tui.commands import BindingCommands
from kotonia_tui.tui.literal import literal_line, notify
from kotonia_tui.tui.messages import (
    LoadProgress,
    ServiceEventMessage,
    ServiceFailed,
    ServiceOpened,
    ServiceReady,
)
from kotonia_tui.tui.screens.chat import ChatScreen
from kotonia_tui.tui.screens.conversations import ConversationsScreen
from kotonia_tui.tui.screens.dialogs import HelpScreen
from kotonia_tui.tui.screens.personas import PersonasScreen
from kotonia_tui.tui.screens.picker import PickerScreen
from kotonia_tui.tui.screens.search import SearchScreen
from kotonia_tui.tui.state import load_state, save_state
from kotonia_tui.tui.widgets.chat_input import ChatInput
from kotonia_tui.tui.widgets.status import StatusLine, join_status

log = logging.getLogger(__name__)

DEFAULT_THEME = "textual-dark"


class KotoniaApp(App[int]):
    """Role-play chat with a memory that lasts."""

    TITLE = "Kotonia"
    CSS_PATH = "kotonia.tcss"
    # Screen classes for small terminals (kotonia.tcss): at 80x24 the pictures give their room
    # to the text, and the lists narrow.
    # (Not ClassVars: Textual declares them on App as instance attributes.)
    HORIZONTAL_BREAKPOINTS: list[tuple[int, str]] | None = [(0, "-narrow"), (100, "-wide")]  # noqa: RUF012
    VERTICAL_BREAKPOINTS: list[tuple[int, str]] | None = [(0, "-short"), (30, "-tall")]  # noqa: RUF012
    COMMANDS: ClassVar = App.COMMANDS | {BindingCommands}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+q", "quit", "Quit", id="quit", priority=True),
        Binding("f1", "help", "Help", id="help"),
        Binding("ctrl+t", "change_theme", "Theme", id="theme", show=False),
        Binding("ctrl+f", "search", "Search", id="search"),
    ]

    # A `var`, not a `reactive`: a reactive on the app repaints the whole screen when it changes,
    # and this one changes every 16 tokens while a reply streams. Its watcher redraws the one
    # line that shows it.
    turn_status: var[str] = var("")

    def __init__(
        self,
        settings: Settings,
        *,
        db: Path | None = None,
        open_conversation_id: int | None = None,
    ) -> None:
        super().__init__()
        self.settings = leave_a_core_for_the_ui(settings)
        self.db = db
        self.open_conversation_id = open_conversation_id
        self.service: ChatService | None = None
        # Reads conversations with or without the model (after a failed load: read only).
        self.reader: ConversationReader | None = None
        # Conversation and persona changes, with or without the model.
        self.manager: ConversationManager | None = None
        self.load_error: str | None = None
        self.model_status = "loading the model…"
        # Per conversation: a chat screen shows its own conversation's, never another's.
        self.fold_statuses: dict[int, Content] = {}
        self.notices: dict[int, Content] = {}
        self.inspector_open = False
        self._service_ready = False
        self._ready_evt = asyncio.Event()
        self._service_closed = False
        self._last_progress: tuple[str, int] = ("", -1)
        dirs = app_dirs()
        self.user_characters_dir = self.settings.user_characters_dir(dirs)
        self.ui_state = load_state()

    # ---- start and stop ----------------------------------------------------------------------

    def on_mount(self) -> None:
        wanted = self.settings.theme or self.ui_state.get("theme") or DEFAULT_THEME
        if wanted in self.available_themes:
            self.theme = wanted
        else:
            notify(self, f"unknown theme {wanted!r}; using {DEFAULT_THEME}", severity="warning")
            self.theme = DEFAULT_THEME
        self.theme_changed_signal.subscribe(self, self._remember_theme)
        if self.settings.keys:
            self.set_keymap(self.settings.keys)
        cards, problems, repairs = self.load_cards()
        self.push_screen(PickerScreen(cards, problems, repairs))
        self.set_interval(1.0, self._tick)
        self.load_service()

    def _remember_theme(self, theme: object) -> None:
        name = getattr(theme, "name", None)
        if isinstance(name, str):
            save_state({"theme": name})

    def load_cards(self) -> tuple[list[CharacterCard], list[str], list[str]]:
        """The cards, the files that could not be read, and the cards read with a repair (a
        repaired card is listed: it is not one that could not be read)."""
        library = open_library(self.settings)
        return (
            list(library.cards),
            [str(p) for p in library.errors],
            [str(p) for p in library.repairs],
        )

    @work(thread=True, exclusive=True, group="load", exit_on_error=False)
    def load_service(self) -> None:
        """Open the store and load the model off the event loop (open_service blocks)."""

        def progress(what: str, done: int, total: int) -> None:
            percent = int(done * 100 / total) if total else 100
            if (what, percent) != self._last_progress:
                self._last_progress = (what, percent)
                self.post_message(LoadProgress(what, done, total))

        try:
            service = open_service(self.settings, db=self.db, progress=progress)
        except Exception as exc:
            log.exception("the model could not be loaded")
            self.post_message(ServiceFailed(str(exc)))
            return
        self.post_message(ServiceOpened(service))

    async def on_service_opened(self, message: ServiceOpened) -> None:
        service = message.service
        if self._service_closed:
            service.engine.close()
            service.store.close()
            return
        await service.start()
        service.subscribe(lambda event: self.post_message(ServiceEventMessage(event)))
        self.service = service
        self.reader = ConversationReader(service.store, service.library)
        self._open_manager(service.manager)
        info = service.engine.info
        vision = " · images" if service.engine.has_vision else ""
        self.model_status = f"{info.model_name} · n_ctx {info.n_ctx:,}{vision}"
        freeze_startup_heap()
        self.post_message(ServiceReady())

    def _open_manager(self, manager: ConversationManager) -> None:
        self.manager = manager
        try:
            # Conversations a session that ended without closing (a crash) left deleted.
            removed = manager.purge_leftovers()
        except Exception as exc:
            log.warning("deleted conversations could not be removed: %s", exc)
            return
        if removed:
            log.info("removed conversations deleted in an earlier session: %s", removed)

    async def on_unmount(self) -> None:
        await self.close_service()
        gc.unfreeze()  # what the app froze at startup is the collector's again

    async def close_service(self) -> None:
        if self._service_closed:
            return
        self._service_closed = True
        if self.service is not None:
            service, self.service = self.service, None
            await service.close("the app was closed")  # a reply still running is stored
        elif self.reader is not None:
            if self.manager is not None:
                self.manager.close()  # this session's deletions are removed for good
            self.reader.store.close()

    async def action_quit(self) -> None:
        await self.close_service()
        self.exit(0)

    async def wait_service(self) -> ChatService | None:
        """The service once loaded; None if loading failed."""
        while not self._service_ready:
            await self._ready_evt.wait()
        return self.service

    async def wait_reader(self) -> ConversationReader | None:
        """Conversations to read once loading ended (None only if the store cannot open)."""
        await self.wait_service()
        return self.reader

    async def wait_manager(self) -> ConversationManager | None:
        """Conversation and persona changes once loading ended (None: no store)."""
        await self.wait_service()
        return self.manager

    # ---- messages ------------------------------------------------------------------------------

    def on_load_progress(self, message: LoadProgress) -> None:
        if self.service is not None:
            return  # a late report; the model is loaded
        if message.total > 1:
            percent = int(message.done * 100 / message.total)
            self.model_status = f"{message.what}: {percent}%"
        else:
            self.model_status = message.what
        self.refresh_status()

    async def on_service_ready(self, _message: ServiceReady) -> None:
        self._service_ready = True
        self._ready_evt.set()
        self.refresh_status()
        if self.open_conversation_id is not None:
            self.open_conversation(self.open_conversation_id)

    def on_service_failed(self, message: ServiceFailed) -> None:
        self.load_error = message.error
        self.model_status = f"the model could not be loaded: {message.error}"
        try:
            # Without the model the conversations can still be read.
            store = open_store(self.settings, self.db)
            library = open_library(self.settings)
            self.reader = ConversationReader(store, library)
            personas = PersonaBook(store, self.settings.persona)
            self._open_manager(ConversationManager(store, library, personas))
        except Exception as exc:
            log.warning("the conversations cannot be read either: %s", exc)
        self._service_ready = True
        self._ready_evt.set()
        notify(
            self,
            f"{message.error}\nConversations can still be read (read only).",
            title="The model could not be loaded",
            severity="error",
            timeout=30,
        )
        self.refresh_status()

    def on_service_event_message(self, message: ServiceEventMessage) -> None:
        event = message.event
        self._describe_event(event)
        for screen in self.screen_stack:
            if isinstance(screen, ChatScreen):
                screen.on_service_event(event)
        self.refresh_status()

    def _describe_event(self, event: ServiceEvent) -> None:
        conv = event.conversation_id
        if isinstance(event, TurnPrepared):
            # A new turn: what the last one said is stale, and a fold it applied has landed.
            self.notices.pop(conv, None)
            if event.fold_applied:
                self.fold_statuses.pop(conv, None)
            return
        if isinstance(event, MemoryNotice):
            warning = event.level is NoticeLevel.WARNING
            self.notices[conv] = literal_line(event.text, "$warning" if warning else "$text-muted")
            if warning:
                notify(self, event.text, title="Memory", severity="warning")
            return
        if isinstance(event, FoldWait):
            # The turn is held for a fold: the chat screen's turn status says how far it got
            # and how to go on without it; the notice says what it waits for, then how it ended.
            self.notices[conv] = literal_line(
                event.text, "$warning" if not event.done else "$text-muted"
            )
            return
        self.fold_statuses[conv] = fold_status(event)

    def _tick(self) -> None:
        service = self.service
        if service is None:
            return
        running = service.worker.running
        if running is not None:
            self.fold_statuses[running.job.conversation_id] = fold_running_status(running)
            self.refresh_status()

    def watch_turn_status(self) -> None:
        self.refresh_status()

    # ---- the status line -----------------------------------------------------------------------

    def status_parts(self, screen: Screen[object]) -> Content:
        if self.load_error:
            model = literal_line(self.model_status, "$error")
        elif self.service is None:
            model = Content.assemble(("◌ ", "$accent"), literal_line(self.model_status, "$accent"))
        else:
            model = literal_line(self.model_status, "$text-muted")
        items = [model]
        if isinstance(screen, ChatScreen):
            if self.turn_status:
                items.append(Content.styled(self.turn_status, "bold $accent"))
            items.append(self.fold_statuses.get(screen.conv_id, Content("")))
            items.append(self.notices.get(screen.conv_id, Content("")))
        return join_status(items)

    def forget_notice(self, conv_id: int) -> None:
        """A conversation's notice no longer holds (its settings changed)."""
        if self.notices.pop(conv_id, None) is not None:
            self.refresh_status()

    def refresh_status(self) -> None:
        try:
            for line in self.screen.query(StatusLine):
                line.refresh_status()
        except Exception:  # no screen yet, or shutting down
            pass

    # ---- navigation ------------------------------------------------------------------------------

    def open_character(self, card: CharacterCard) -> None:
        self.push_screen(ConversationsScreen(card))

    def user_name(self) -> str:
        """The default persona's name ({{user}} in what is shown before a conversation)."""
        if self.manager is not None:
            try:
                return self.manager.personas.default().name
            except Exception as exc:  # shown with the settings' name; the error is logged
                log.warning("the default persona cannot be read: %s", exc)
        return self.settings.persona.name

    def _not_ready(self) -> str:
        if self.load_error:
            return f"The model could not be loaded: {self.load_error}"
        return "The model is still loading."

    def open_conversation(
        self, conv: StoredConversation | int, at_message: int | None = None
    ) -> None:
        """Open a chat (at the end, or at `at_message`, selected)."""
        reader = self.reader
        if reader is None:
            notify(self, self._not_ready(), severity="warning")
            return
        if isinstance(conv, int):
            try:
                conv = reader.conversation(conv)
            except Exception as exc:
                notify(self, str(exc), title="Not opened", severity="error")
                return
        self.push_screen(
            ChatScreen(reader, conv, self.service, self._not_ready(), at_message=at_message)
        )

    def action_search(self) -> None:
        if isinstance(self.screen, SearchScreen):
            self.screen.query_one("#search-input").focus()
            return
        reader = self.reader
        if reader is None:
            notify(self, self._not_ready(), title="Search", severity="warning")
            return
        chat = self.screen if isinstance(self.screen, ChatScreen) else None
        self.push_screen(
            SearchScreen(reader, chat.conversation if chat else None), self._open_found
        )

    def _open_found(self, found: tuple[int, int] | None) -> None:
        """A message chosen in the search: the chat showing its conversation jumps to it;
        otherwise its conversation opens there (Ctrl+B comes back)."""
        if found is None:
            return
        conv_id, message_id = found
        if isinstance(self.screen, ChatScreen) and self.screen.conv_id == conv_id:
            self.screen.jump_to(message_id)
        else:
            self.open_conversation(conv_id, at_message=message_id)

    def start_conversation(
        self, card: CharacterCard, greeting: int, persona_id: int | None = None
    ) -> None:
        service, reader = self.service, self.reader
        if service is None or reader is None:
            notify(self, self._not_ready(), title="Not started", severity="warning")
            return
        try:
            persona = service.personas.get(persona_id) if persona_id is not None else None
            conv = service.new_conversation(card, greeting=greeting, persona=persona)
        except Exception as exc:
            notify(self, str(exc), title="Not started", severity="error")
            return
        self.push_screen(ChatScreen(reader, conv, service))

    def start_group(self, cards: list[CharacterCard]) -> None:
        """A group conversation with `cards` as its cast, in this order (issue 31); asked for
        while the model loads, it starts once the model is ready."""
        if not self._service_ready:
            notify(self, "The model is still loading: the group starts when it is ready.")
            self._start_group_when_ready(cards, self.screen)
            return
        service, reader = self.service, self.reader
        if service is None or reader is None:
            notify(self, self._not_ready(), title="Not started", severity="warning")
            return
        try:
            conv = service.groups.new_group(cards)
        except Exception as exc:
            notify(self, str(exc), title="Not started", severity="error")
            return
        self.push_screen(ChatScreen(reader, conv, service))

    @work(group="start-group", exclusive=True)
    async def _start_group_when_ready(
        self, cards: list[CharacterCard], asked_on: Screen[object]
    ) -> None:
        await self.wait_service()
        if self.screen is not asked_on:
            return  # the player went on elsewhere in the meantime; a chat would jump at them
        self.start_group(cards)

    # ---- help ----------------------------------------------------------------------------------

    def help_rows(self) -> list[tuple[str, str, str, str]]:
        homes: list[tuple[str, list[BindingType]]] = [
            ("everywhere", list(self.BINDINGS)),
            ("characters", list(PickerScreen.BINDINGS)),
            ("conversations", list(ConversationsScreen.BINDINGS)),
            ("personas", list(PersonasScreen.BINDINGS)),
            ("chat", list(ChatScreen.BINDINGS)),
            ("search", list(SearchScreen.BINDINGS)),
            ("message box", list(ChatInput.BINDINGS)),
        ]
        # The keys of the screen the player is on come first: the table is longer than the dialog.
        here = {
            PickerScreen: ("characters",),
            ConversationsScreen: ("conversations",),
            PersonasScreen: ("personas",),
            ChatScreen: ("chat", "message box"),
        }.get(type(self.screen), ())
        homes.sort(key=lambda home: here.index(home[0]) if home[0] in here else len(here))
        keymap = dict(self._keymap)
        rows: list[tuple[str, str, str, str]] = [
            ("Ctrl+P", "Command palette (every action)", "", "everywhere")
        ]
        for where, bindings in homes:
            for binding in bindings:
                if not isinstance(binding, Binding) or not binding.id:
                    continue
                keys = keymap.get(binding.id, binding.key)
                rows.append((_pretty_keys(keys), binding.description, binding.id, where))
        return rows

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
            return
        self.push_screen(HelpScreen(self.help_rows()))


def fold_running_status(running: RunningFold) -> Content:
    """The status line's fold item while a job runs, redrawn each second: named as its events
    name it ("◑ chapter #5-#9 running 12 s"), by the label the worker read when the job started
    (`RunningFold.label`; this tick reads no store), never by its store id."""
    return Content.assemble(
        ("◑ ", "bold $accent"), f"{running.label} running {running.elapsed_s:.0f} s"
    )


def fold_status(event: FoldProgress) -> Content:
    """The status line's fold item for a fold event; every state has its own line. The job is
    named as the inspector's fold queue names it, by its kind and range in message numbers
    ("chapter #5-#9 landed"), never by its store id, which would read as a message number."""
    label = event.job_label
    match event.state:
        case FoldState.QUEUED:
            return Content.assemble(("◔ ", "$accent"), f"{label} queued")
        case FoldState.RUNNING:
            return Content.assemble(("◑ ", "bold $accent"), f"{label} running")
        case FoldState.DEFERRED:
            return Content.assemble(
                ("◔ ", "$warning"), literal_line(f"{label} waiting: {event.detail}")
            )
        case FoldState.LANDED:
            return Content.assemble(
                ("● ", "bold $success"), f"{label} landed: applied on the next turn"
            )
        case FoldState.FAILED:
            return Content.assemble(
                ("✗ ", "bold $error"), literal_line(f"{label} failed: {event.detail}", "$error")
            )
        case _:
            assert_never(event.state)


def _pretty_keys(keys: str) -> str:
    parts = []
    for key in keys.split(","):
        key = key.strip()
        pretty = "+".join(p.capitalize() if len(p) > 1 else p.upper() for p in key.split("+"))
        parts.append(pretty.replace("Escape", "Esc"))
    return " / ".join(parts)


def leave_a_core_for_the_ui(settings: Settings) -> Settings:
    """Without a configured thread count, generate on all cores but one.

    llama.cpp's worker threads spin at their barriers; on a small machine a busy UI thread
    competing with them for the last core slowed a tiny model from ~2,000 to ~3 tokens/s in the
    Pilot tests. Giving the UI its own core keeps both fast.
    """
    if settings.active_profile().threads is not None:
        return settings
    cores = os.cpu_count() or 1
    return settings.model_copy(update={"threads": max(1, cores - 1)})


def freeze_startup_heap() -> None:
    """Keep what startup built out of every later garbage collection.

    Once the model is loaded the process holds a great many objects that live as long as the app
    (modules, pydantic models, the engine), and a full collection on the UI thread walks every
    one of them: a streaming reply froze for it (docs/decisions.md D-15). `gc.freeze()` moves
    them to the permanent generation, so a full collection walks only what was made since. The
    garbage is collected first, so nothing dead is kept; the app unfreezes when it ends.
    """
    gc.collect()
    gc.freeze()


def run_app(settings: Settings, *, db: Path | None = None) -> int:
    """Run the TUI until the user quits; returns the exit status."""
    app = KotoniaApp(settings, db=db)
    app.run()
    return app.return_code or 0
