"""Search every conversation (or the one open): type words, Enter opens the message found.

The query runs a quarter of a second after the last key (and at once on Enter), through the
conversation reader, so searching works when the model could not be loaded. The screen returns
(conversation id, message id) for the app to open the chat at that message.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.timer import Timer
from textual.widgets import Footer, Header, Input, Label, ListItem, ListView, Static

from kotonia_tui.chat.reader import ConversationReader
from kotonia_tui.chat.search import SearchResult
from kotonia_tui.domain import StoredConversation
from kotonia_tui.store import SearchOrder
from kotonia_tui.tui.literal import literal_line, notify
from kotonia_tui.tui.render import plural
from kotonia_tui.tui.screens.base import KotoniaScreen
from kotonia_tui.tui.widgets.status import StatusLine

RESULTS = 50
DEBOUNCE_S = 0.25
HIGHLIGHT = "bold reverse $accent"


def result_label(result: SearchResult) -> Content:
    """Where the message is (its time in this machine's local time, as the user and
    SillyTavern's dates tell it; the store keeps UTC), then its snippet with the matches
    highlighted."""
    conv, hit = result.conversation, result.hit
    title = conv.title or f"conversation {conv.id}"
    where = literal_line(
        f"{conv.character_name} · {title} · #{result.number} · {hit.speaker} · "
        f"{hit.created_at.astimezone():%Y-%m-%d %H:%M}",
        "$text-muted",
    )
    snippet = result.snippet
    pieces: list[Content] = [Content("…")] if snippet.cut_before else []
    at = 0
    for start, end in snippet.spans:
        pieces.append(literal_line(snippet.text[at:start]))
        pieces.append(literal_line(snippet.text[start:end], HIGHLIGHT))
        at = end
    pieces.append(literal_line(snippet.text[at:]))
    if snippet.cut_after:
        pieces.append(Content("…"))
    return Content("\n").join([where, Content("").join(pieces)])


class ResultItem(ListItem):
    def __init__(self, result: SearchResult) -> None:
        super().__init__(Label(result_label(result)))
        self.result = result


class SearchScreen(KotoniaScreen[tuple[int, int] | None]):
    """The query box, what was found, and where."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close search", id="close_search"),
        # The app's Ctrl+F opens this screen: here it goes back to the query, and the footer
        # does not offer it (a screen's binding of a key wins over the app's).
        Binding("ctrl+f", "to_query", "Search", id="search_query", show=False),
        Binding("ctrl+o", "toggle_scope", "All / this conversation", id="search_scope"),
        Binding("ctrl+n", "toggle_order", "Best / newest first", id="search_order"),
        Binding("down", "to_results", "Results", id="search_results", show=False),
    ]

    # The footer keeps to the search's own keys, Quit and Help, and never cuts one at 80 columns.
    FOOTER_FIRST = frozenset({"close_search", "search_scope", "search_order", "quit", "help"})

    def __init__(
        self,
        reader: ConversationReader,
        conversation: StoredConversation | None = None,
        query: str = "",
    ) -> None:
        super().__init__()
        self.reader = reader
        self.conversation = conversation  # the chat it was opened from, if any
        self.only_this = False
        self.order = SearchOrder.RANK
        self.results: list[SearchResult] = []
        self._query = query
        self._timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="search-box"):
            yield Input(
                self._query,
                placeholder="Words to find (every one); Japanese and Chinese: any part of a word",
                id="search-input",
            )
            yield Static(id="search-status")
            yield ListView(id="search-results")
        yield StatusLine()
        yield Footer()

    def on_mount(self) -> None:
        self.title = "Search"
        self.sub_title = "every conversation"
        self.query_one("#search-input", Input).focus()
        self._show_status()
        if self._query:
            self.run_search()

    # ---- searching ------------------------------------------------------------------------

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(DEBOUNCE_S, self.run_search)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if self._timer is not None:
            self._timer.stop()
        self.run_search()
        if self.results:
            self.action_to_results()

    def run_search(self) -> None:
        query = self.query_one("#search-input", Input).value
        scope = self.conversation.id if self.only_this and self.conversation else None
        try:
            self.results = (
                self.reader.search(query, conversation_id=scope, limit=RESULTS, order=self.order)
                if query.strip()
                else []
            )
        except Exception as exc:
            notify(self, str(exc), title="Search", severity="error")
            self.results = []
        listing = self.query_one("#search-results", ListView)
        listing.clear()
        listing.extend(ResultItem(result) for result in self.results)
        if self.results:
            listing.index = 0
        self._show_status()

    def _show_status(self) -> None:
        query = self.query_one("#search-input", Input).value
        where = (
            f"in {self.conversation.title or f'conversation {self.conversation.id}'}"
            if self.only_this and self.conversation
            else "in every conversation"
        )
        order = "best first" if self.order is SearchOrder.RANK else "newest first"
        if not query.strip():
            text = f"Type words to find {where}."
        elif not self.results:
            text = f"No message {where} has every word."
        else:
            more = " (the first shown)" if len(self.results) >= RESULTS else ""
            text = f"{plural(len(self.results), 'message')}{more} {where}, {order}."
        keys = "Enter opens a message · Ctrl+O this conversation/all · Ctrl+N order · Esc closes"
        if self.conversation is None:
            keys = keys.replace(" · Ctrl+O this conversation/all", "")
        self.query_one("#search-status", Static).update(
            Content.assemble(literal_line(text), "\n", (keys, "$text-muted"))
        )
        self.sub_title = where

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "toggle_scope":
            return self.conversation is not None  # nothing to narrow to outside a chat
        return True

    # ---- actions --------------------------------------------------------------------------

    def action_to_query(self) -> None:
        self.query_one("#search-input", Input).focus()

    def action_to_results(self) -> None:
        if self.results:
            self.query_one("#search-results", ListView).focus()

    def action_toggle_scope(self) -> None:
        self.only_this = not self.only_this
        self.run_search()

    def action_toggle_order(self) -> None:
        self.order = SearchOrder.NEWEST if self.order is SearchOrder.RANK else SearchOrder.RANK
        self.run_search()

    def action_close(self) -> None:
        self.dismiss(None)

    def on_list_view_selected(self, event: ListView.Selected) -> None:
        event.stop()
        if isinstance(event.item, ResultItem):
            hit = event.item.result.hit
            self.dismiss((hit.conversation_id, hit.message_id))
