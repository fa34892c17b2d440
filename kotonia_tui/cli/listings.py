"""The commands that read and write files without the model: the card and conversation
listings, chat import and export."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from kotonia_tui.chat.bootstrap import open_library, open_store
from kotonia_tui.chat.importing import import_chat_file
from kotonia_tui.chat.personas import PersonaBook
from kotonia_tui.chat.reader import ConversationReader
from kotonia_tui.chatfiles import ReadProgress, write_sillytavern
from kotonia_tui.cli.output import Interrupted, json_text, plural, say
from kotonia_tui.config import Settings, app_dirs
from kotonia_tui.safe_files import replacing
from kotonia_tui.terminal_text import visible


def characters(args: argparse.Namespace, settings: Settings) -> int:
    library = open_library(settings)
    for problem in library.errors:
        say(f"warning: {problem}", stream=sys.stderr)
    for repair in library.repairs:
        say(f"note: {repair}", stream=sys.stderr)
    rows = [
        {
            "key": card.key,
            "name": card.name,
            "nickname": card.nickname,
            "greetings": (1 if card.first_mes else 0) + len(card.alternate_greetings),
            "picture": card.image is not None,
            "path": str(card.source_path),
        }
        for card in library.cards
    ]
    if args.json:
        print(json_text(rows))
    else:
        for row in rows:
            greetings = row["greetings"]
            assert isinstance(greetings, int)
            fields = (row["key"], row["name"], plural(greetings, "greeting"), row["path"])
            print("\t".join(visible(str(f), one_line=True) for f in fields))
    return 0


def conversations(args: argparse.Namespace, settings: Settings) -> int:
    library = open_library(settings)
    with open_store(settings, args.db, read_only=args.read_only) as store:
        if args.character:
            # The card's conversations, chats filed under its name included (as the app lists).
            convs = ConversationReader(store, library).conversations_of(
                library.find(args.character)
            )
        else:
            convs = store.list_conversations()
        casts = {c.id: store.cast(c.id) for c in convs}  # a one-card chat: its card
    rows = [
        {
            "id": c.id,
            "character": c.character_key,
            "character_name": c.character_name,
            "messages": c.message_count,
            "updated": c.updated_at.isoformat(timespec="seconds"),
            "title": c.title,
            "persona": c.persona_name,
            "cast": [
                {"character": m.character_key, "name": m.character_name, "muted": m.muted}
                for m in casts[c.id]
            ],
        }
        for c in convs
    ]
    if args.json:
        print(json_text(rows))
    else:
        for row in rows:
            fields = (
                row["id"],
                row["character"],
                plural(row["messages"], "message"),  # type: ignore[arg-type]
                row["updated"],
                row["title"],
            )
            print("\t".join(visible(str(f), one_line=True) for f in fields))
    return 0


# A smaller file imports in a few seconds: no progress line for it.
PROGRESS_FROM_BYTES = 8 * 2**20


def _import_progress(path: Path) -> Callable[[ReadProgress], None]:
    """One line on standard error per tenth of the file read (in place on a terminal)."""
    last = -1
    live = sys.stderr.isatty()

    def report(read: ReadProgress) -> None:
        nonlocal last
        if read.total < PROGRESS_FROM_BYTES:
            return
        tenth = read.done * 10 // read.total
        if tenth == last:
            return
        last = tenth
        end = "\r" if live and tenth < 10 else "\n"
        say(f"importing {path.name}: {read.where()}", stream=sys.stderr, end=end, one_line=True)

    return report


class _StopRequest:
    """A stop asked for by a signal, taken between two lines of the file.

    The handler only notes the signal: an exception raised from a handler surfaces wherever
    the main thread is, and inside pydantic's serializer it came out wrapped as a
    serialization error, a traceback instead of "interrupted". A second signal raises at
    once, for a user who does not want to wait for the next line."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def note(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            raise Interrupted(signum)
        self.signum = signum

    def check(self) -> None:
        if self.signum is not None:
            raise Interrupted(self.signum)


@contextmanager
def _stop_between_lines() -> Iterator[_StopRequest]:
    """SIGTERM (`timeout`, a service manager) and Ctrl-C stop the import at the next line: the
    transaction is rolled back and the user is told how far it got, instead of a silent death
    or a traceback."""
    request = _StopRequest()
    try:
        previous = {
            sig: signal.signal(sig, request.note) for sig in (signal.SIGTERM, signal.SIGINT)
        }
    except ValueError:  # not the main thread: no handler here
        yield request
        return
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def import_chat(args: argparse.Namespace, settings: Settings) -> int:
    path = Path(args.file)
    library = open_library(settings)
    card = library.find(args.character) if args.character else None
    read = ReadProgress()
    report = _import_progress(path)
    try:
        with _stop_between_lines() as stop, open_store(settings, args.db) as store:

            def advance(now: ReadProgress) -> None:
                stop.check()
                report(now)

            read.on_advance = advance
            personas = PersonaBook(store, settings.persona)
            imported = import_chat_file(
                store,
                path,
                args.user or personas.default().name,
                card.name if card else None,
                card.key if card else None,
                match=library.match,
                personas=personas,
                read=read,
            )
    except (KeyboardInterrupt, Interrupted) as exc:
        say(
            f"error: the import of {path} was interrupted at {read.where()}; nothing was "
            "stored (an import is all or nothing)",
            stream=sys.stderr,
        )
        return exc.status if isinstance(exc, Interrupted) else 130
    for note in imported.notes:
        say(f"note: {note}", stream=sys.stderr)
    stored = imported.conversation
    card = card or imported.card
    print(stored.id)
    if card is not None:
        say(
            f"imported {plural(imported.messages, 'message')} into conversation {stored.id} "
            f"with card {card.key} ({card.name})",
            stream=sys.stderr,
        )
    else:
        say(
            f"imported {plural(imported.messages, 'message')} into conversation {stored.id}; "
            f"no card matches the character {stored.character_name!r}: add their card to "
            f"{settings.user_characters_dir(app_dirs())} (the chat is matched by name), "
            "or import again with --character KEY",
            stream=sys.stderr,
        )
    return 0


def personas(args: argparse.Namespace, settings: Settings) -> int:
    with open_store(settings, args.db, read_only=args.read_only) as store:
        # A read-only data dir lists what is stored; otherwise the settings' persona is there.
        found = store.personas() if args.read_only else PersonaBook(store, settings.persona).all()
        rows = [
            {
                "id": p.id,
                "name": p.name,
                "default": p.is_default,
                "conversations": store.persona_conversations(p.id),
                "picture": p.image is not None,
                "description": p.description,
            }
            for p in found
        ]
    if args.json:
        print(json_text(rows))
        return 0
    for row in rows:
        count = row["conversations"]
        assert isinstance(count, int)
        fields = (
            row["id"],
            row["name"],
            "default" if row["default"] else "-",
            plural(count, "conversation"),
            row["description"],
        )
        print("\t".join(visible(str(f), one_line=True) for f in fields))
    return 0


def export_chat(args: argparse.Namespace, settings: Settings) -> int:
    with open_store(settings, args.db, read_only=args.read_only) as store:
        conv = store.get_conversation(args.id)
        messages = store.iter_messages(args.id)
        chat_settings = store.conversation_settings(args.id)
        cast = store.cast(args.id)
        if args.output:
            out_path = Path(args.output)
            with replacing(out_path, stream_ok=True) as out:
                count = write_sillytavern(conv, messages, out, store.get_image, chat_settings, cast)
            say(f"wrote {plural(count, 'message')} to {out_path}", stream=sys.stderr)
        else:
            write_sillytavern(conv, messages, sys.stdout, store.get_image, chat_settings, cast)
    return 0
