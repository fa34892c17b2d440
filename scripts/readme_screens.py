"""Render the README's screen captures from the app itself, or check that they are up to date.

    .venv/bin/python scripts/readme_screens.py            # rewrite the captures in README.md
    .venv/bin/python scripts/readme_screens.py --check    # exit 1 naming the captures that differ
    .venv/bin/python scripts/readme_screens.py --list     # the captures, their sizes, scenarios

Each capture in README.md sits between `<!-- screen:NAME -->` and `<!-- /screen -->`. A
scenario below drives the real app (Textual's Pilot, as the TUI tests do) at the size the README
states and takes the screen as plain text at the points it names; several captures can come
from one scenario (a resize between them). The text is what a terminal shows, without colours:
the characters of `App.export_screenshot()` (Textual's public screenshot, an SVG) put back on
their cells, lines stripped at the right.

Deterministic on any machine, at any time:

* a temporary KOTONIA_HOME, with the shipped sample cards and what a scenario writes there (a
  card or a World Info file made for the capture, personas, an imported chat); every other
  KOTONIA_ variable is set aside while it runs, so the shipped settings are in effect (semantic
  recall excepted: it is off, so no embedding model is loaded);
* the model is the test suite's fake engine (tests/fake_engine.py), named as the embedded
  default: the replies are scripted here, token counts are the fake's own (about four
  characters a token), and it takes no time (0 ms). UI layout does not depend on the model,
  which is what makes a fake right for this;
* pictures are drawn in coloured half cells, as on a true-colour terminal, at textual-image's
  own default cell size (10x20 pixels), whatever the terminal the script runs in;
* dates shown come from the scenarios (an imported chat's send dates, a stored chat's), read
  and shown in UTC whatever the machine's zone (TZ is UTC while a scenario runs: the app shows
  dates in local time); ages ("just now") are of messages written during the run and are taken
  at the scenario's start, so a slow machine does not make them "1 min ago";
* the temporary data folder is shown as the one a user on Linux has
  (/home/you/.local/share/kotonia-tui; the temporary one is made as long, so nothing moves),
  and no other temporary path may appear in a capture;
* a notice (toast) is taken down before a capture unless the capture keeps it: whether it is
  still up would depend on how fast the steps before it ran.

Exit status: 0 when written (or, with --check, when every capture is up to date); 1 when a
capture differs (--check) or a marker is missing or a scenario fails; 2 on wrong usage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import html
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# The app (Textual, the chat service) is imported where it is used: --help and --list answer
# at once.
REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the fake engine lives in the test suite (tests/)

README = REPO / "README.md"
MODEL_NAME = "Gemma 3 270m"  # the embedded default's name as the status line shows it
BEGIN = re.compile(r"^<!-- screen:([a-z0-9-]+) -->$")
END = "<!-- /screen -->"


# ---- the screen as text ----------------------------------------------------------------------

# Rich's SVG (what `App.export_screenshot` returns) writes every run of text as one <text>
# element at x = column * the cell width, clipped to its line (`clip-path="url(#…-line-N)"`);
# runs of spaces are not written. Each line's clip rectangle is the terminal's width.
_TEXT = re.compile(
    r'<text [^>]*?\bx="([\d.]+)"[^>]*?clip-path="url\(#[\w-]*?-line-(\d+)\)"[^>]*>(.*?)</text>',
    re.S,
)
_LINE_CLIP = re.compile(r'<clipPath id="[\w-]*?-line-0">\s*<rect [^>]*?\bwidth="([\d.]+)"')


class ScreenshotError(Exception):
    """The screenshot is not the SVG this script reads (a Rich or Textual that writes another)."""


_SVG_CHANGED = (
    "; Rich or Textual may write its SVG screenshot differently now: see what svg_to_text in "
    "scripts/readme_screens.py expects (a <text> per run, at x = column * cell width, clipped "
    "to its line) and adapt it"
)


def svg_to_text(svg: str, width: int, height: int) -> str:
    """The characters of a Textual SVG screenshot on their cells; lines stripped at the right."""
    from rich.cells import cell_len

    clip, runs = _LINE_CLIP.search(svg), _TEXT.findall(svg)
    if clip is None or not runs:
        raise ScreenshotError("no lines of text found in the SVG screenshot" + _SVG_CHANGED)
    cell_width = float(clip.group(1)) / width
    rows = [[" "] * width for _ in range(height)]
    for x, line, escaped in runs:
        if int(line) >= height:
            raise ScreenshotError(f"text on line {line} of a {height}-line screen" + _SVG_CHANGED)
        row, column = rows[int(line)], round(float(x) / cell_width)
        for char in html.unescape(escaped).replace("\n", ""):
            if cell_len(char) == 0 and column > 0:  # a combining mark: on the cell before it
                row[min(column, width) - 1] += char
                continue
            if column >= width:
                break
            row[column] = " " if char == "\xa0" else char  # Rich writes spaces as &#160;
            for spare in range(1, cell_len(char)):  # a wide character takes two cells
                if column + spare < width:
                    row[column + spare] = ""
            column += cell_len(char)
    return "\n".join("".join(row).rstrip() for row in rows)


def squeezed(text: str) -> str:
    """`text` with each run of identical lines shown once (empty rows of a list, say)."""
    kept: list[str] = []
    for line in text.splitlines():
        if not kept or line != kept[-1]:
            kept.append(line)
    return "\n".join(kept)


# ---- a scenario ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Capture:
    name: str  # the README marker's NAME
    size: tuple[int, int]  # as the README says it
    squeeze: bool = False  # runs of identical rows shown once (the README says so)
    # The notices (toasts) still up; otherwise they are cleared first, as their time would:
    # whether one is still up depends on how fast the steps before it ran.
    notices: bool = False


@dataclass
class Stage:
    """What a scenario drives: the running app, its Pilot, and where the captures go."""

    app: Any  # KotoniaApp
    pilot: Any  # textual.pilot.Pilot
    captures: dict[str, Capture]
    taken: dict[str, str] = field(default_factory=dict)

    async def until(self, condition: Callable[[], object], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the app did not get there in {timeout:.0f} s")
            await self.pilot.pause(0.02)

    async def on(self, kind: type) -> Any:
        """Wait until a screen of `kind` is on top; returns it."""
        await self.until(lambda: isinstance(self.app.screen, kind))
        await self.pilot.pause()
        return self.app.screen

    async def press(self, *keys: str) -> None:
        await self.pilot.press(*keys)
        await self.pilot.pause()

    async def type(self, text: str) -> None:
        """Put `text` into the focused box at its cursor, as typing it does (a line break as
        Ctrl+J puts one)."""
        from textual.widgets import Input, TextArea

        box = self.app.focused
        if isinstance(box, TextArea):
            box.insert(text)
        elif isinstance(box, Input):
            box.insert_text_at_cursor(text)
        else:
            raise RuntimeError(f"no text box has the focus ({box!r})")
        await self.pilot.pause()

    async def resize(self, width: int, height: int) -> None:
        await self.pilot.resize_terminal(width, height)
        await self.pilot.pause()

    def text(self) -> str:
        width, height = self.app.size
        return svg_to_text(self.app.export_screenshot(), width, height)

    async def forget_notices(self) -> None:
        """Take every notice (toast) down, as their time would: on the screen on top and on
        the screens under it (a dialog shows the screen under it, toasts and all)."""
        try:  # Textual's own (private) widget: an import error says it moved, a query would not
            from textual.widgets._toast import ToastHolder
        except ImportError as exc:
            raise RuntimeError(
                f"Textual no longer has textual.widgets._toast.ToastHolder ({exc}): "
                "Stage.forget_notices in scripts/readme_screens.py must take the toasts of the "
                "screens under the top one down another way"
            ) from exc

        self.app.clear_notifications()
        for screen in self.app.screen_stack:
            for holder in screen.query(ToastHolder):
                await holder.remove()
        await self.pilot.pause()

    async def capture(self, name: str) -> None:
        """Take the screen as `name`, once the app is idle and two looks agree."""
        capture = self.captures[name]
        if tuple(self.app.size) != capture.size:
            raise RuntimeError(
                f"{name}: the app is {self.app.size}, the README says {capture.size}"
            )
        await self.reading()  # first: a notice the app raises while it settles goes too
        if not capture.notices:
            await self.forget_notices()
        await self.pilot.wait_for_scheduled_animations()
        shown, deadline = self.text(), time.monotonic() + 10
        while True:
            await self.pilot.pause(0.1)
            await self.pilot.pause()
            again = self.text()
            if again == shown or time.monotonic() > deadline:
                break
            shown = again
        self.taken[name] = squeezed(again) if capture.squeeze else again

    # -- the steps every scenario takes --

    async def rename(self, chat: Any, title: str) -> None:
        """Alt+R in a chat: the conversation's new title."""
        from textual.widgets import Input

        from kotonia_tui.tui.screens.ask import AskTextScreen

        await self.press("alt+r")
        ask = await self.on(AskTextScreen)
        ask.query_one("#ask-text", Input).value = title
        await self.press("enter")
        await self.until(lambda: self.app.screen is chat)

    async def ready(self) -> None:
        from kotonia_tui.tui.screens.picker import PickerScreen

        await asyncio.wait_for(self.app.wait_service(), 30)
        await self.on(PickerScreen)

    async def choose_card(self, key: str) -> Any:
        """On the character list, choose `key`: its conversations open."""
        from textual.widgets import ListView

        from kotonia_tui.tui.screens.conversations import ConversationsScreen
        from kotonia_tui.tui.screens.picker import CardItem

        listing = self.app.screen.query_one("#card-list", ListView)
        listing.index = [item.card.key for item in listing.query(CardItem)].index(key)
        await self.press("enter")
        return await self.on(ConversationsScreen)

    async def new_chat(self, key: str) -> Any:
        """From the character list, a new conversation with `key` on its first greeting."""
        from kotonia_tui.tui.screens.chat import ChatScreen

        await self.choose_card(key)
        await self.press("n", "enter")
        return await self.on(ChatScreen)

    async def send(self, chat: Any, text: str) -> None:
        """Type a message and send it; wait for the reply."""
        await self.type(text)
        await self.turn(chat, "enter")

    async def reading(self) -> None:
        """Wait for what the app does while a person reads: after a reply, the look-ahead at
        the next turn and the engine keeping the history ready (they change the next turn's
        figures, so they must not race it), then the engine idle."""
        service = self.app.service
        if service is None:
            return
        await service.looked_ahead()
        await service.states_settled()
        await self.until(lambda: not service.engine.busy)
        await self.pilot.pause()

    async def turn(self, chat: Any, *keys: str) -> None:
        """Press keys that start a turn (Enter, →, Ctrl+R) and wait for its end."""
        await self.reading()
        ended = chat.turns_ended
        await self.press(*keys)
        await self.until(lambda: chat.turns_ended > ended and not chat.streaming)
        await self.reading()


Prepare = Callable[[Path], None]  # files and store rows before the app runs, given a work folder
Drive = Callable[[Stage], Awaitable[None]]


@dataclass(frozen=True)
class Scenario:
    name: str
    captures: tuple[Capture, ...]
    drive: Drive
    replies: tuple[str, ...] = ()  # the model's replies, in order (the fake engine writes them)
    prepare: Prepare | None = None
    open_conversation: int | None = None  # as `kotonia` opens one: the chat at once


# ---- the scenarios ---------------------------------------------------------------------------


def _settings() -> Any:
    from kotonia_tui.config import load_settings

    return load_settings(semantic_recall=False)


def _store_and_cards() -> tuple[Any, Any]:
    from kotonia_tui.chat.bootstrap import open_library, open_store

    settings = _settings()
    return open_store(settings), open_library(settings)


def _personas(store: Any) -> Any:
    from kotonia_tui.chat.personas import PersonaBook

    return PersonaBook(store, _settings().persona)


def _png(path: Path, color: str, size: tuple[int, int] = (56, 56)) -> Path:
    from PIL import Image

    Image.new("RGB", size, color).save(path, format="PNG")
    return path


ANN = "Ann Harrow"
ANN_ABOUT = (
    "A cartographer from Portcallow, thirty, sharp-eyed and patient. {{user}} carries her late "
    "grandfather's stopped pocket watch."
)
MARA = "Mara Quill"
MARA_ABOUT = "A nurse's sister who came to Saltmere on the last ferry of the season."


def _ann_and_mara(work: Path) -> None:
    """Two personas besides the settings' User; Ann (with a picture) the default."""
    store, _cards = _store_and_cards()
    with store:
        book = _personas(store)
        book.default()  # User, the settings' persona, comes first
        ann = book.create(ANN, ANN_ABOUT, _png(work / "ann.png", "#6b8e9e"))
        book.create(MARA, MARA_ABOUT)
        book.make_default(ann.id)


async def _picker(stage: Stage) -> None:
    await stage.ready()
    await stage.capture("picker")


async def _first_chat(stage: Stage) -> None:
    await stage.ready()
    chat = await stage.new_chat("rowan-ashby")
    await stage.send(
        chat,
        "Good evening, Rowan.\nI came about my father's old pocket watch. It stopped at 4:17.",
    )
    await stage.send(chat, "Can you open it tonight?")
    await stage.press("f2")
    await stage.capture("chat-inspector")


ST_CHAT = "Rowan Ashby - 2024-3-2 @19h04m.jsonl"


def _sillytavern_chat(work: Path) -> None:
    """A SillyTavern chat with Rowan, imported as `kotonia import` does: a system note, his
    greeting with a second version, and Ann's message, with no answer yet."""
    from kotonia_tui.chat.importing import import_chat_file

    lines: list[dict[str, Any]] = [
        {"user_name": "Ann", "character_name": "Rowan Ashby", "create_date": "2024-3-2@19h04m"},
        {
            "name": "SillyTavern System",
            "is_user": False,
            "is_system": True,
            "send_date": "March 2, 2024 7:04pm",
            "mes": "[Start a new chat]",
        },
        {
            "name": "Rowan Ashby",
            "is_user": False,
            "send_date": "March 2, 2024 7:04pm",
            "mes": 'The bell above the door rings. "Evening. Mind the umbrella stand."',
            "swipe_id": 0,
            "swipes": [
                'The bell above the door rings. "Evening. Mind the umbrella stand."',
                '"We\'re closed," *he says, without looking up.* "Unless it\'s urgent."',
            ],
        },
        {
            "name": "Ann",
            "is_user": True,
            "send_date": "March 2, 2024 7:05pm",
            "mes": "I found this watch in my grandmother's attic.\nIt stopped at 4:17.",
        },
    ]
    path = work / ST_CHAT
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    store, cards = _store_and_cards()
    with store:
        import_chat_file(store, path, "User", match=cards.match, personas=_personas(store))


async def _imported_chat(stage: Stage) -> None:
    from kotonia_tui.tui.screens.chat import ChatScreen

    chat = await stage.on(ChatScreen)
    await stage.turn(chat, "enter")  # Enter on the empty box: Rowan answers Ann's message
    await stage.capture("imported-chat")
    await stage.press("f2")
    await stage.capture("imported-chat-inspector")


async def _personas_screens(stage: Stage) -> None:
    from textual.widgets import ListView

    from kotonia_tui.tui.screens.dialogs import ConfirmScreen
    from kotonia_tui.tui.screens.personas import PersonaEditScreen, PersonaItem, PersonasScreen
    from kotonia_tui.tui.screens.picker import PickerScreen

    await stage.ready()
    await stage.press("f5")
    await stage.on(PersonasScreen)
    await stage.capture("personas")
    await stage.resize(80, 24)
    await stage.press("e")  # Ann, the default, is the first in the list
    await stage.on(PersonaEditScreen)
    await stage.capture("persona-edit")
    await stage.press("escape")
    await stage.on(PersonasScreen)
    await stage.press("escape")
    await stage.on(PickerScreen)
    chat = await stage.new_chat("rowan-ashby")
    await stage.send(chat, "Good evening. Is this where the registry clerk lodges?")
    await stage.rename(chat, "The registry clerk")
    await stage.press("f5")
    chooser = await stage.on(PersonasScreen)
    listing = chooser.query_one("#persona-list", ListView)
    listing.index = [item.persona.name for item in listing.query(PersonaItem)].index(MARA)
    await stage.press("enter")
    await stage.on(ConfirmScreen)
    await stage.capture("persona-switch")


async def _open_listed(stage: Stage, conv_id: int) -> Any:
    """On a character's conversations, open conversation `conv_id`."""
    from textual.widgets import ListView

    from kotonia_tui.tui.screens.chat import ChatScreen
    from kotonia_tui.tui.screens.conversations import ConversationItem

    listing = stage.app.screen.query_one("#conv-list", ListView)
    listing.focus()
    listing.index = [item.conversation.id for item in listing.query(ConversationItem)].index(
        conv_id
    )
    await stage.press("enter")
    await stage.until(
        lambda: isinstance(stage.app.screen, ChatScreen) and stage.app.screen.conv_id == conv_id
    )
    await stage.pilot.pause()
    return stage.app.screen


async def _branch_at(stage: Stage, chat: Any, back: int) -> Any:
    """Alt+↑ `back` times (the last message first), then Ctrl+N: the branch's chat."""
    from kotonia_tui.tui.screens.chat import ChatScreen

    await stage.press(*["alt+up"] * back)
    await stage.press("ctrl+n")
    await stage.until(
        lambda: (
            isinstance(stage.app.screen, ChatScreen) and stage.app.screen.conv_id != chat.conv_id
        )
    )
    await stage.pilot.pause()
    return stage.app.screen


async def _branches(stage: Stage) -> None:
    from kotonia_tui.tui.screens.conversations import ConversationsScreen

    await stage.ready()
    chat = await stage.new_chat("rowan-ashby")
    await stage.send(
        chat, "Good evening. My grandfather's watch stopped at 4:17. Can you open it tonight?"
    )
    await stage.turn(chat, "right")  # → on the empty box: another version of the reply
    await stage.capture("swipe")
    await stage.send(chat, "What do you charge for a new mainspring?")
    clerk = await _branch_at(stage, chat, 3)  # at #3, his answer
    await stage.rename(clerk, "The registry clerk")
    await stage.press("ctrl+b")
    await stage.on(ConversationsScreen)
    chat = await _open_listed(stage, chat.conv_id)
    await stage.forget_notices()  # the first branch's and the rename's, long gone by now
    await _branch_at(stage, chat, 2)  # at #4, her question
    await stage.until(lambda: "Branched" in stage.text())  # the notice says what it made
    await stage.capture("branch")
    await stage.press("ctrl+b")
    await stage.on(ConversationsScreen)
    await stage.capture("conversations")
    await stage.resize(80, 24)
    await stage.capture("conversations-80x24")


def _at(minute: int) -> datetime:
    return datetime(2026, 12, 1, 18, 55, tzinfo=UTC).replace(minute=55 + minute)


def _two_chats_to_search(work: Path) -> None:
    """A conversation with Rowan (stored with its dates), and a SillyTavern chat with 紬,
    imported."""
    from kotonia_tui.chat.importing import import_chat_file
    from kotonia_tui.domain import Conversation, Message, Role
    from kotonia_tui.memory.segments import parse_segments

    rowan = [
        (Role.CHARACTER, "Rowan Ashby", 0, _ROWAN_GREETING),
        (
            Role.USER,
            "User",
            0,
            "Good evening, Rowan. I came about my father's old pocket watch. It stopped at 4:17.",
        ),
        (
            Role.CHARACTER,
            "Rowan Ashby",
            1,
            '*He turns it over twice before he opens it.* "Someone has had this open before '
            "me, and not a watchmaker. Look at the scratches by the hinge. Where did your "
            'father keep it?"',
        ),
        (Role.USER, "User", 2, "In a drawer at the lighthouse, with the logbooks."),
    ]
    messages = [
        Message(
            role=role,
            speaker=speaker,
            text=text,
            created_at=_at(minute),
            segments=parse_segments(
                text, speaker=speaker, listener="User" if speaker != "User" else "Rowan Ashby"
            ),
        )
        for role, speaker, minute, text in rowan
    ]
    lines: list[dict[str, Any]] = [
        {"user_name": "Ann", "character_name": "紬", "create_date": "2024-3-2@19h04m"},
        {
            "name": "紬",
            "is_user": False,
            "send_date": "March 2, 2024 7:04pm",
            "mes": "いらっしゃいませ。古い時計の修理ですか？",
        },
        {
            "name": "Ann",
            "is_user": True,
            "send_date": "March 2, 2024 7:05pm",
            "mes": "祖母の懐中時計が四時十七分で止まってしまいました。",
        },
        {
            "name": "紬",
            "is_user": False,
            "send_date": "March 2, 2024 7:06pm",
            "mes": "拝見します。…この時計、灯台の鍵と一緒に見つかったのでは？",
        },
    ]
    path = work / "tsumugi.jsonl"
    path.write_text(
        "\n".join(json.dumps(line, ensure_ascii=False) for line in lines) + "\n", encoding="utf-8"
    )
    store, cards = _store_and_cards()
    with store:
        store.import_conversation(
            Conversation(
                character_key="rowan-ashby", character_name="Rowan Ashby", persona_name="User"
            ),
            messages,
        )
        import_chat_file(store, path, "User", match=cards.match, personas=_personas(store))


_ROWAN_GREETING = (
    "*The bell above the door gives a thin, tired ring. Behind the counter, a man in a leather "
    "apron looks up from a watch movement spread out on green felt, a loupe still screwed into "
    'one eye.* "Evening. Mind the umbrella stand, it bites."'
)


async def _search(stage: Stage) -> None:
    from textual.widgets import Input

    from kotonia_tui.tui.screens.search import SearchScreen

    await stage.ready()
    await stage.press("ctrl+f")
    search = await stage.on(SearchScreen)
    box = search.query_one("#search-input", Input)
    box.value = "watch"
    await stage.press("enter")
    await stage.capture("search")
    box.focus()  # back in the box (Enter moved to the results)
    box.value = "時計"
    await stage.press("enter")
    await stage.resize(80, 24)
    await stage.capture("search-japanese")


SALTMERE = {
    "entries": {
        "0": {
            "uid": 0,
            "key": ["ferry"],
            "comment": "The ferry",
            "content": "The Saltmere ferry crosses to Pellmouth at dawn and at dusk, tide "
            "allowing.",
            "order": 100,
        },
        "1": {
            "uid": 1,
            "key": ["tide"],
            "comment": "Tides",
            "content": "At high tide the harbour wall is awash; the old steps to the light flood "
            "first.",
            "order": 100,
        },
        "2": {
            "uid": 2,
            "key": ["lighthouse"],
            "comment": "The Saltmere light",
            "content": "The lighthouse on the point has been dark for eleven years, since the "
            "night of the wreck.",
            "order": 100,
        },
    }
}


def _saltmere_world(work: Path) -> None:
    """A World Info file made for the capture, in the data folder's worlds/."""
    from kotonia_tui.config import app_dirs

    folder = app_dirs().world_info
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "saltmere-harbour.json").write_text(json.dumps(SALTMERE), encoding="utf-8")


async def _settings_and_lore(stage: Stage) -> None:
    from textual.widgets import Input, SelectionList, TextArea

    from kotonia_tui.tui.screens.chat_settings import ChatSettingsScreen
    from kotonia_tui.tui.widgets.inspector import InspectorPane

    await stage.ready()
    chat = await stage.new_chat("rowan-ashby")
    await stage.send(chat, "Someone told me the lighthouse lamp was lit last night.")
    await stage.press("f9")
    form = await stage.on(ChatSettingsScreen)
    form.query_one("#conversation-temperature", Input).value = "0.7"
    form.query_one("#character-reply_max_tokens", Input).value = "200"
    form.query_one("#conversation-lore_budget", Input).value = "120"
    note = form.query_one("#conversation-note", TextArea)
    note.text = "[{{char}} speaks in short sentences; the storm is getting worse.]"
    await stage.press("ctrl+s")
    await stage.until(lambda: stage.app.screen is chat)
    await stage.press("f9")  # opened again: what is stored, and what is in effect
    form = await stage.on(ChatSettingsScreen)
    await stage.capture("settings")
    await stage.resize(80, 24)
    await stage.capture("settings-80x24")
    await stage.resize(120, 40)
    world = form.query_one("#conversation-world", SelectionList)
    world.focus()  # as Tab does: the form scrolls down to it
    await stage.press("space")  # its first file: saltmere-harbour.json
    await stage.capture("settings-world-info")
    await stage.press("ctrl+s")
    await stage.until(lambda: stage.app.screen is chat)
    await stage.send(
        chat,
        "Your sister Maud says the watch came from a shipwreck, and the lighthouse lamp was lit "
        "at high tide.",
    )
    await stage.send(
        chat,
        "Tobias, the ferry leaves at dawn. Maud is waiting on the harbour wall with the watch.",
    )
    await stage.press("f2")
    inspector = chat.query_one(InspectorPane)
    await stage.until(lambda: bool(inspector.query("#lore")))
    inspector.scroll_to_widget(inspector.query_one("#lore"), animate=False, top=True)
    await stage.pilot.pause()
    await stage.capture("inspector-lorebook")


def _expression_card(work: Path) -> None:
    """A card made for the capture: Mira, with expression pictures (CHARX assets)."""
    from kotonia_tui.config import app_dirs
    from tests.characters.builders import charx_card, picture, v3_card

    moods = {"neutral": "#8a9ba8", "joy": "#e0b040", "sad": "#4a6fa5", "angry": "#b03a2e"}
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    assets = [
        {"type": "emotion", "uri": f"embeded://assets/emotion/{m}.png", "name": m, "ext": "png"}
        for m in moods
    ]
    card = v3_card(
        "Mira",
        description="Mira keeps the lighthouse on a stormy northern coast.",
        first_mes='*Mira sets down her lantern and smiles.* "You made it through the storm, '
        '{{user}}."',
        assets=assets,
        creator_notes="A card made for the README's capture of expressions.",
    )
    files = {f"assets/emotion/{m}.png": picture(color=c, size=(56, 56)) for m, c in moods.items()}
    charx_card(folder / "mira.charx", card, files)


async def _expressions(stage: Stage) -> None:
    await stage.ready()
    chat = await stage.new_chat("mira")
    await stage.send(chat, "I'm afraid I broke the lighthouse lamp, Mira. The glass is in pieces.")
    await stage.send(chat, "You look upset, Mira. Why are you crying?")
    await stage.capture("expressions")
    await stage.resize(80, 24)
    await stage.capture("expressions-80x24")


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("start", (Capture("picker", (120, 40)),), _picker),
    Scenario(
        "a first chat",
        (Capture("chat-inspector", (120, 40)),),
        _first_chat,
        replies=(
            '*He takes the watch and turns it to the lamp.* "Four seventeen. A good hour to '
            'stop at, if a watch must stop." *He runs a thumb over the case.* "Your father '
            'kept it wound. The crown is worn smooth."',
            '"Tonight?" *He glances at the clocks along the wall, then back at you.* "For '
            "you, yes. Sit by the stove. If the mainspring is whole, it will take me an "
            'hour."',
        ),
    ),
    Scenario(
        "an imported chat",
        (Capture("imported-chat", (80, 24)), Capture("imported-chat-inspector", (80, 24))),
        _imported_chat,
        replies=(
            '*He opens the case with a thumbnail and tilts it to the lamp.* "Four seventeen, '
            "and the balance wheel still. See this scratch by the regulator? Someone opened "
            'it in a hurry, years ago."',
        ),
        prepare=_sillytavern_chat,
        open_conversation=1,
    ),
    Scenario(
        "personas",
        (
            Capture("personas", (120, 40), squeeze=True),
            Capture("persona-edit", (80, 24)),
            Capture("persona-switch", (80, 24)),
        ),
        _personas_screens,
        replies=(
            '"Two doors down, above the chandler\'s." *He sets down his loupe.* "Though he '
            'keeps odd hours for a clerk."',
        ),
        prepare=_ann_and_mara,
    ),
    Scenario(
        "branches",
        (
            Capture("swipe", (120, 40), squeeze=True),
            Capture("branch", (120, 40), squeeze=True, notices=True),
            Capture("conversations", (120, 40)),
            Capture("conversations-80x24", (80, 24)),
        ),
        _branches,
        replies=(
            '*He holds out his hand for it.* "Four seventeen. Let me see the movement first; '
            'a stopped watch tells you where it hurts."',
            "*He turns the watch to the lamp and frowns.* \"Your grandfather's? The case has "
            'been opened before, and not by a watchmaker. Someone was looking for something."',
            '"Four shillings, and a week." *He snaps the case shut.* "Less, if it is only '
            'the mainspring. It seldom is."',
        ),
        prepare=_ann_and_mara,
    ),
    Scenario(
        "search",
        (Capture("search", (120, 40), squeeze=True), Capture("search-japanese", (80, 24))),
        _search,
        prepare=_two_chats_to_search,
    ),
    Scenario(
        "settings and lore",
        (
            Capture("settings", (120, 40)),
            Capture("settings-80x24", (80, 24)),
            Capture("settings-world-info", (120, 40)),
            Capture("inspector-lorebook", (120, 40)),
        ),
        _settings_and_lore,
        replies=(
            '*He stops winding the clock in his hands.* "Lit? That lamp has been dark for '
            'eleven years."',
            '*His hands go still on the counter.* "Maud talks too much." *He does not look '
            'up.* "The Grey Heron went down with all hands. Nobody lit anything."',
            '"Then she will wait a long time." *He sets the watch face down.* "I am not '
            'Tobias. Not any more."',
        ),
        prepare=_saltmere_world,
    ),
    Scenario(
        "expressions",
        (Capture("expressions", (120, 40)), Capture("expressions-80x24", (80, 24))),
        _expressions,
        replies=(
            '*She laughs, but her eyes stay on the broken glass.* "Come in, the kettle is on. '
            'Glass can be mended; you cannot."',
            "*She wipes her cheek with the back of her hand.* \"I'm not crying. It's the smoke "
            "from the lamp, that's all.\" *Her voice catches.* \"It was my father's lamp. "
            'I keep thinking of him, crying."',
        ),
        prepare=_expression_card,
    ),
)


def captures_of(scenarios: tuple[Scenario, ...]) -> dict[str, Capture]:
    return {c.name: c for s in scenarios for c in s.captures}


# ---- running one -----------------------------------------------------------------------------


class ScenarioError(Exception):
    """A scenario could not drive the app where it meant to (the message shows the screen)."""


class Replies:
    """The fake engine's answers: the scenario's replies, one a chat call, in order."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.left = list(scenario.replies)
        self.used = 0

    def __call__(self, request: Any) -> str:
        if request.json_schema is not None or str(request.slot) == "fold":
            raise RuntimeError(f"{self.scenario.name}: the scenario asked for no fold")
        if not self.left:
            raise RuntimeError(f"{self.scenario.name}: more replies were asked for than scripted")
        self.used += 1
        return self.left.pop(0)


_MISSING = object()


@contextlib.contextmanager
def _swapped(owner: object, name: str, value: object) -> Iterator[None]:
    """`owner.name` is `value` inside, what it was afterwards."""
    saved = getattr(owner, name, _MISSING)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if saved is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, saved)


@contextlib.contextmanager
def _environment(home: Path, open_service: Callable[..., Any]) -> Iterator[None]:
    """The seams a scenario runs behind, all put back afterwards: KOTONIA_HOME is `home` and
    every other KOTONIA_ variable is set aside; the local time zone is UTC; a private umask, as
    `kotonia` runs with; the app opens `open_service` (the fake engine) instead of the model;
    ages are taken at the start; pictures are drawn in half cells at a fixed cell size,
    whatever the terminal."""
    import textual_image.widget

    import kotonia_tui.tui.app as app_module
    import kotonia_tui.tui.render as render
    import kotonia_tui.tui.screens.conversations as conversations
    import kotonia_tui.tui.screens.dialogs as dialogs
    import kotonia_tui.tui.widgets.inspector as inspector
    import kotonia_tui.tui.widgets.portrait as portrait

    try:  # textual-image's private cache of the terminal's cell size
        from textual_image._terminal import CellSize, get_cell_size
    except ImportError as exc:
        raise RuntimeError(_CELL_SIZE_MOVED.format(exc)) from exc

    started = datetime.now(UTC)

    def age(when: datetime, now: datetime | None = None) -> str:
        """The app's age, at the scenario's start: "just now" for what the run wrote, however
        long the steps before a capture took."""
        del now
        return render.age(when, started)

    saved_env = {k: v for k, v in os.environ.items() if k.startswith("KOTONIA_")}
    saved_zone = os.environ.get("TZ")
    for name in saved_env:
        del os.environ[name]
    os.environ["KOTONIA_HOME"] = str(home)
    os.environ["TZ"] = "UTC"
    time.tzset()
    umask = os.umask(0o077)
    try:
        with contextlib.ExitStack() as seams:
            seams.enter_context(_swapped(app_module, "open_service", open_service))
            for module in (conversations, dialogs, inspector):
                seams.enter_context(_swapped(module, "age", age))
            picture = textual_image.widget.HalfcellImage
            seams.enter_context(_swapped(portrait, "TerminalImage", picture))
            # 10x20: textual-image's own default, what it assumes off a terminal
            seams.enter_context(_swapped(get_cell_size, "_result", CellSize(10, 20)))
            if get_cell_size() != CellSize(10, 20):
                raise RuntimeError(_CELL_SIZE_MOVED.format("get_cell_size._result is not read"))
            yield
    finally:
        os.umask(umask)
        os.environ.pop("KOTONIA_HOME", None)
        os.environ.update(saved_env)
        if saved_zone is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = saved_zone
        time.tzset()


_CELL_SIZE_MOVED = (
    "textual-image no longer caches the terminal's cell size as get_cell_size._result in "
    "textual_image._terminal ({}): _environment in scripts/readme_screens.py must fix it at "
    "10x20 another way, or the pictures' size would follow the terminal the script runs in"
)


def shown_data_dir() -> str:
    """The data folder a user on Linux has, shown in place of the temporary one."""
    from kotonia_tui.config import APP_NAME

    return f"/home/you/.local/share/{APP_NAME}"


def _temporary_home() -> tuple[Path, Path]:
    """A new folder, and a KOTONIA_HOME in it whose data folder's path is exactly as long as
    `shown_data_dir()`, so the one can stand for the other without moving anything on the
    screen."""
    base = Path(tempfile.mkdtemp(prefix="ks", dir="/tmp" if Path("/tmp").is_dir() else None))
    pad = len(shown_data_dir()) - len(f"{base}/h/home/data")
    if pad < 0:
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError(f"the temporary folder {base} has too long a path for the captures")
    return base, base / ("h" * (1 + pad)) / "home"


async def run_scenario(scenario: Scenario) -> dict[str, str]:
    """Run one scenario in a temporary home; its captures by name."""
    from kotonia_tui.chat.bootstrap import fold_context_size, open_library, open_store
    from kotonia_tui.chat.service import ChatService
    from kotonia_tui.tui.app import KotoniaApp
    from tests.fake_engine import FakeEngine

    replies = Replies(scenario)

    def open_service(settings: Any, *, db: Path | None = None, progress: Any = None) -> Any:
        """chat.bootstrap.open_service with the fake engine in place of the model."""
        profile = settings.active_profile()
        engine = FakeEngine(
            profile,
            replies,
            fold_ctx_for=lambda n: fold_context_size(settings, n, profile.reply_max_tokens),
            name=MODEL_NAME,
        )
        return ChatService(settings, open_store(settings, db), engine, open_library(settings))

    base, home = _temporary_home()
    work = base / "work"
    home.mkdir(parents=True)
    work.mkdir()
    captures = {c.name: c for c in scenario.captures}
    try:
        with _environment(home, open_service):
            if scenario.prepare is not None:
                scenario.prepare(work)
            app = KotoniaApp(_settings(), open_conversation_id=scenario.open_conversation)
            size = scenario.captures[0].size
            async with app.run_test(size=size, notifications=True) as pilot:
                stage = Stage(app, pilot, captures)
                try:
                    await scenario.drive(stage)
                except Exception as exc:
                    raise ScenarioError(
                        f"{scenario.name}: {type(exc).__name__}: {exc}; the screen then:\n"
                        + stage.text()
                    ) from exc
                await app.action_quit()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    missing = [name for name in captures if name not in stage.taken]
    if missing:
        raise ScenarioError(f"{scenario.name}: took no capture {', '.join(missing)}")
    if replies.left:
        raise ScenarioError(
            f"{scenario.name}: {len(replies.left)} scripted replies were not asked for"
        )
    shown = {}
    for name, text in stage.taken.items():
        text = text.replace(f"{home}/data", shown_data_dir())
        if str(base) in text:
            raise ScenarioError(f"{name}: a temporary path shows on the screen")
        shown[name] = text
    return shown


# ---- the README ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    name: str
    start: int  # the line after the opening fence
    end: int  # the closing fence's line


def blocks(lines: list[str]) -> dict[str, Block]:
    """The captures between markers: `<!-- screen:NAME -->`, a ```text fence, `<!-- /screen -->`."""
    found: dict[str, Block] = {}
    index = 0
    while index < len(lines):
        begin = BEGIN.match(lines[index])
        if begin is None:
            index += 1
            continue
        name = begin.group(1)
        if lines[index + 1 : index + 2] != ["```text"]:
            raise ValueError(f"README.md:{index + 2}: screen:{name} must open a ```text fence")
        close = next((i for i in range(index + 2, len(lines)) if lines[i] == "```"), None)
        if close is None or lines[close + 1 : close + 2] != [END]:
            raise ValueError(
                f"README.md:{index + 1}: screen:{name} has no fence and {END} after it"
            )
        if name in found:
            raise ValueError(f"README.md:{index + 1}: screen:{name} is there twice")
        found[name] = Block(name, index + 2, close)
        index = close + 2
    return found


def replaced(text: str, shown: dict[str, str]) -> str:
    lines = text.split("\n")
    marked = blocks(lines)
    for block in sorted(marked.values(), key=lambda b: b.start, reverse=True):
        if block.name in shown:
            lines[block.start : block.end] = shown[block.name].split("\n")
    return "\n".join(lines)


def differences(text: str, shown: dict[str, str]) -> dict[str, str]:
    """The captures whose README text is not what the app shows, with a diff each."""
    lines = text.split("\n")
    marked = blocks(lines)
    out = {}
    for name, now in shown.items():
        block = marked[name]
        written = lines[block.start : block.end]
        if written != now.split("\n"):
            diff = difflib.unified_diff(
                written, now.split("\n"), f"README.md ({name})", "the app", lineterm="", n=1
            )
            out[name] = "\n".join(diff)
    return out


def selected(only: str | None) -> tuple[Scenario, ...]:
    if not only:
        return SCENARIOS
    wanted = {name.strip() for name in only.split(",") if name.strip()}
    known = captures_of(SCENARIOS)
    unknown = sorted(wanted - set(known))
    if unknown:
        raise KeyError(", ".join(unknown))
    return tuple(s for s in SCENARIOS if any(c.name in wanted for c in s.captures))


def render(scenarios: tuple[Scenario, ...]) -> dict[str, str]:
    shown: dict[str, str] = {}
    for scenario in scenarios:
        shown.update(asyncio.run(run_scenario(scenario)))
    return shown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Captures: "
        + ", ".join(f"{c.name} ({c.size[0]}x{c.size[1]})" for c in captures_of(SCENARIOS).values()),
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 naming the captures that differ",
    )
    parser.add_argument(
        "--only", metavar="NAME[,NAME]", help="only these captures (and their scenarios)"
    )
    parser.add_argument("--list", action="store_true", help="list the captures and exit")
    parser.add_argument("--readme", type=Path, default=README, help="the file (default README.md)")
    args = parser.parse_args(argv)
    if args.list:
        for scenario in SCENARIOS:
            for c in scenario.captures:
                print(f"{c.name}\t{c.size[0]}x{c.size[1]}\t{scenario.name}")
        return 0
    try:
        scenarios = selected(args.only)
    except KeyError as exc:
        parser.error(f"no capture named {exc.args[0]} (--list lists them)")
    try:
        text = args.readme.read_text(encoding="utf-8")
        marked = blocks(text.split("\n"))
    except (OSError, ValueError) as exc:
        print(f"readme_screens: {exc}", file=sys.stderr)
        return 1
    wanted = [c.name for s in scenarios for c in s.captures]
    unmarked = [name for name in wanted if name not in marked]
    if unmarked:
        print(
            f"readme_screens: {args.readme.name} has no marker for {', '.join(unmarked)}",
            file=sys.stderr,
        )
        return 1
    started = time.monotonic()
    try:
        shown = render(scenarios)
    except Exception as exc:
        print(f"readme_screens: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    spent = time.monotonic() - started
    if args.check:
        differ = differences(text, shown)
        for diff in differ.values():
            print(diff, file=sys.stderr)
        if differ:
            print(
                f"readme_screens: {len(differ)} of {len(shown)} captures differ from the app: "
                f"{', '.join(differ)} (run scripts/readme_screens.py to rewrite them)",
                file=sys.stderr,
            )
            return 1
        print(f"readme_screens: {len(shown)} captures up to date ({spent:.1f} s)", file=sys.stderr)
        return 0
    new = replaced(text, shown)
    if new != text:
        args.readme.write_text(new, encoding="utf-8")
    changed = differences(text, shown)
    print(
        f"readme_screens: {len(shown)} captures rendered in {spent:.1f} s; "
        + (f"rewrote {', '.join(changed)}" if changed else "all were up to date"),
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
