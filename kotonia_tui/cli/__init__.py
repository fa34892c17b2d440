"""The `kotonia` command: the TUI by default, plus chat, characters, conversations, personas,
conversation management (rename, delete, duplicate, branch), search, memory, import, export,
eval and doctor for scripts.

Conventions (docs/cli.md, relied on by scripts): list commands print one item per line, the id
or name first (`--json` for JSON); `chat --say` prints only the reply on standard output
(progress and figures go to standard error); exit status 0 on success, 1 on a user-facing error
(one line on standard error), 2 on wrong usage.

Each command's module is imported when that command runs (`chat`, `listings`, `search`,
`memory`, `doctor`, the app, the evaluation): `kotonia --version` and `kotonia characters`
never load llama_cpp, numpy or the database layer, and the app draws its first frame before
the model library loads.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from kotonia_tui import __version__
from kotonia_tui.chat.errors import (
    AttachmentError,
    ChatError,
    ManageError,
    PersonaError,
    UnknownCharacterError,
)
from kotonia_tui.chat.startup import (
    DataDirError,
    add_secrets,
    db_files,
    make_private,
    prepare_dirs,
    private_note,
    setup_logging,
)
from kotonia_tui.chatfiles.errors import ImportFormatError
from kotonia_tui.cli.output import (
    StandardOutputError,
    TypedText,
    UserError,
    guarded_stdout,
    reopen_closed_streams,
    say,
)
from kotonia_tui.config import ConfigError, Settings, app_dirs, load_settings
from kotonia_tui.engine.errors import EngineError
from kotonia_tui.eval.arguments import add_arguments as add_eval_arguments
from kotonia_tui.safe_files import WriteError, disk_full
from kotonia_tui.store.errors import StoreError

log = logging.getLogger("kotonia")

USER_ERRORS: tuple[type[Exception], ...] = (
    UserError,
    StandardOutputError,
    ConfigError,
    EngineError,
    StoreError,
    ImportFormatError,
    ChatError,
    AttachmentError,
    UnknownCharacterError,
    WriteError,
    PersonaError,
    ManageError,
)


def _chat(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio

    from kotonia_tui.cli.chat import run_chat

    return asyncio.run(run_chat(args, settings))


def _characters(args: argparse.Namespace, settings: Settings) -> int:
    from kotonia_tui.cli.listings import characters

    return characters(args, settings)


def _conversations(args: argparse.Namespace, settings: Settings) -> int:
    from kotonia_tui.cli.listings import conversations

    return conversations(args, settings)


def _import(args: argparse.Namespace, settings: Settings) -> int:
    from kotonia_tui.cli.listings import import_chat

    return import_chat(args, settings)


def _export(args: argparse.Namespace, settings: Settings) -> int:
    from kotonia_tui.cli.listings import export_chat

    return export_chat(args, settings)


def _search(args: argparse.Namespace, settings: Settings) -> int:
    from kotonia_tui.cli.search import search

    return search(args, settings)


def _memory(args: argparse.Namespace, settings: Settings) -> int:
    from kotonia_tui.cli.memory import memory

    return memory(args, settings)


def _personas(args: argparse.Namespace, settings: Settings) -> int:
    from kotonia_tui.cli.listings import personas

    return personas(args, settings)


def _rename(args: argparse.Namespace, settings: Settings) -> int:
    from kotonia_tui.cli.managing import rename

    return rename(args, settings)


def _delete(args: argparse.Namespace, settings: Settings) -> int:
    from kotonia_tui.cli.managing import delete

    return delete(args, settings)


def _branch(args: argparse.Namespace, settings: Settings) -> int:
    from kotonia_tui.cli.managing import branch

    return branch(args, settings)


def _quick_replies(args: argparse.Namespace, settings: Settings) -> int:
    from kotonia_tui.cli.quick_replies import quick_replies

    return quick_replies(args, settings)


def _settings(args: argparse.Namespace, settings: Settings) -> int:
    from kotonia_tui.cli.settings import chat_settings

    return chat_settings(args, settings)


def _doctor(args: argparse.Namespace, settings: Settings) -> int:
    from kotonia_tui.cli.doctor import run_doctor

    return run_doctor(args, settings)


def _eval(args: argparse.Namespace, settings: Settings) -> int:
    from kotonia_tui.eval.command import run_command

    return run_command(args, settings)


# ---- the app ----------------------------------------------------------------------------------


def _tui(args: argparse.Namespace, settings: Settings) -> int:
    from kotonia_tui.tui.app import run_app  # Textual loads only when the app opens

    return run_app(settings, db=args.db)


# ---- argument parsing -------------------------------------------------------------------------


def _at_least_one(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {number}")
    return number


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kotonia", description="Kotonia TUI: role-play chat with a memory that lasts."
    )
    parser.add_argument("--version", action="version", version=f"kotonia-tui {__version__}")
    parser.add_argument("--db", type=Path, help="the SQLite database (default: in the data dir)")
    sub = parser.add_subparsers(dest="command")

    chat = sub.add_parser("chat", help="chat in the terminal, line by line (headless)")
    chat.add_argument("character", help="card key or name (see `kotonia characters`)")
    chat.add_argument(
        "--say",
        action="append",
        default=[],
        metavar="TEXT",
        help="send TEXT and print only the reply; repeatable (several turns, in order)",
    )
    chat.add_argument("--conversation", type=int, metavar="ID", help="continue conversation ID")
    chat.add_argument(
        "--with",
        dest="with_",
        action="append",
        default=[],
        metavar="OTHER",
        help="a group chat: OTHER card joins the cast (repeatable; each reply prints as "
        "'Name: text'); with --conversation, joins it from now on",
    )
    chat.add_argument(
        "--order",
        choices=["natural", "list"],
        help="who answers in a group: natural (a member named in the message first, then by "
        "talkativeness) or list (every member in turn); kept for the conversation",
    )
    chat.add_argument(
        "--greeting", type=int, default=0, metavar="N", help="which greeting opens a new one (0)"
    )
    chat.add_argument(
        "--image", action="append", default=[], metavar="FILE", help="attach an image file"
    )
    chat.add_argument(
        "--persona",
        metavar="NAME",
        help="play as this persona (see `kotonia personas`; made if new); with --conversation, "
        "from now on",
    )
    chat.add_argument(
        "--stats", action="store_true", help="print each turn's figures as a JSON line (stderr)"
    )
    chat.add_argument(
        "--no-wait",
        dest="wait_folds",
        action="store_false",
        help="exit without waiting for queued folds",
    )

    characters = sub.add_parser("characters", help="list the character cards")
    characters.add_argument("--json", action="store_true", help="print a JSON list")

    conversations = sub.add_parser("conversations", help="list conversations")
    conversations.add_argument("character", nargs="?", help="only this character's")
    conversations.add_argument("--json", action="store_true", help="print a JSON list")

    personas = sub.add_parser("personas", help="list the personas you play as")
    personas.add_argument("--json", action="store_true", help="print a JSON list")

    rename = sub.add_parser("rename", help="give a conversation a title")
    rename.add_argument("id", type=int, help="the conversation")
    rename.add_argument("title", help="the new title ('' for none)")

    delete = sub.add_parser("delete", help="delete a conversation for good, with its memory")
    delete.add_argument("id", type=int, help="the conversation")

    duplicate = sub.add_parser("duplicate", help="copy a conversation, memory included")
    duplicate.add_argument("id", type=int, help="the conversation")
    duplicate.add_argument("--title", help="the copy's title")

    branch = sub.add_parser(
        "branch", help="a new conversation sharing the story (and memory) up to a message"
    )
    branch.add_argument("id", type=int, help="the conversation")
    branch.add_argument("message", help="the last shared message, numbered as the app shows it")
    branch.add_argument("--title", help="the branch's title")

    imp = sub.add_parser("import", help="import a SillyTavern .jsonl chat or a JSON list")
    imp.add_argument("file", help="the chat file (.jsonl or .json)")
    imp.add_argument("--character", help="the card the conversation belongs to")
    imp.add_argument(
        "--user",
        metavar="NAME",
        help="who you are in a JSON list: the lines NAME says without a role are yours, and "
        "the chat is played as persona NAME (default: your default persona; a SillyTavern "
        ".jsonl chat says it in its header and on each line)",
    )

    found = sub.add_parser(
        "search", help="find messages in every conversation (or one) by their words"
    )
    found.add_argument("query", help="words to find (all of them); Japanese/Chinese: any part")
    found.add_argument("--conversation", type=int, metavar="ID", help="only in conversation ID")
    found.add_argument(
        "--limit", type=_at_least_one, default=20, metavar="N", help="at most N messages (20)"
    )
    found.add_argument("--newest", action="store_true", help="newest first (default: best first)")
    found.add_argument("--json", action="store_true", help="print a JSON list")

    memory = sub.add_parser(
        "memory", help="print the memory the next turn of a conversation carries"
    )
    memory.add_argument("id", type=int, help="the conversation (see `kotonia conversations`)")
    memory.add_argument("--json", action="store_true", help="print it as JSON")

    chat_set = sub.add_parser(
        "settings", help="show or set a conversation's settings (generation, Author's Note, lore)"
    )
    chat_set.add_argument("id", type=int, help="the conversation (see `kotonia conversations`)")
    chat_set.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set one (repeatable; an empty VALUE clears it; world_info: files, comma-separated)",
    )
    chat_set.add_argument(
        "--character", action="store_true", help="set the character's layer, not the conversation's"
    )
    chat_set.add_argument("--json", action="store_true", help="print it as JSON")

    exp = sub.add_parser("export", help="write a conversation as SillyTavern .jsonl")
    exp.add_argument("id", type=int, help="the conversation (see `kotonia conversations`)")
    exp.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE instead of standard output"
    )

    evaluate = sub.add_parser(
        "eval", help="measure forgetting: recall by fold range for each memory design, and audit"
    )
    add_eval_arguments(evaluate)

    quick = sub.add_parser(
        "quick-replies",
        help="list, add, delete or import your quick replies (Alt+1-9 and Alt+Q in a chat)",
    )
    quick.add_argument("--character", metavar="KEY", help="one character's (default: global)")
    quick.add_argument("--add", metavar="LABEL", help="add a quick reply with this label")
    quick.add_argument("--text", metavar="TEXT", help="its text (with --add)")
    quick.add_argument(
        "--insert", action="store_true", help="put it into the message box instead of sending"
    )
    quick.add_argument("--delete", type=int, metavar="ID", help="delete quick reply ID")
    quick.add_argument(
        "--import",
        dest="import_file",
        metavar="FILE",
        help="import a SillyTavern quick-reply set (.json); slash commands are left out",
    )
    quick.add_argument("--json", action="store_true", help="print a JSON list")

    doctor = sub.add_parser("doctor", help="check paths, model files, database and libraries")
    doctor.add_argument(
        "--load", action="store_true", help="also load the model and the embedding model"
    )

    return parser


# Arguments that are text, not file names: bytes that are not UTF-8 become U+FFFD, as in any
# stored text (a file name keeps its bytes, so the file can still be opened).
TEXT_ARGUMENTS = {
    "chat": {"character": "the character name", "say": "--say", "persona": "--persona"},
    "conversations": {"character": "the character name"},
    "import": {"character": "--character"},
    "rename": {"title": "the title"},
    "duplicate": {"title": "--title"},
    "branch": {"message": "the message number", "title": "--title"},
    "search": {"query": "the query"},
    "quick-replies": {"add": "--add", "text": "--text", "character": "--character"},
}


def _typed_arguments(args: argparse.Namespace) -> None:
    typed = TypedText()
    for name, where in TEXT_ARGUMENTS.get(args.command or "", {}).items():
        value = getattr(args, name, None)
        if isinstance(value, str):
            setattr(args, name, typed(value, where))
        elif isinstance(value, list):
            setattr(args, name, [typed(v, where) for v in value])


# Commands that only read: they work on a read-only data dir.
READ_ONLY_COMMANDS = frozenset(
    {"characters", "conversations", "personas", "search", "memory", "export", "doctor"}
)


def main(argv: Sequence[str] | None = None) -> int:
    closed = reopen_closed_streams()
    parser = build_parser()
    args = parser.parse_args(argv)
    if "standard output" in closed:
        # What the command prints (an export, an id, a reply) would be lost without a word.
        print(
            "error: standard output is closed, so nothing this command prints could be seen "
            "(for export, write to a file with -o FILE)",
            file=sys.stderr,
        )
        return 1
    _typed_arguments(args)
    umask = os.umask(0o077)  # every file and folder this run creates is private to the user
    if args.command is not None and isinstance(sys.stdout, io.TextIOWrapper):
        # A script that reads stdout and stderr from one pipe sees each line where it was
        # written: the id line of `import` before the note on stderr, not after it at exit.
        sys.stdout.reconfigure(line_buffering=True)
    try:
        return _run(args)
    finally:
        os.umask(umask)


def _run(args: argparse.Namespace) -> int:
    home = os.environ.get("KOTONIA_HOME")
    if home is not None and not home.strip():
        # Set but empty (a script's unset variable): the user's real data would be used.
        print(
            "error: KOTONIA_HOME is set but empty: give it a folder, or unset it to use the "
            "usual places (see `kotonia doctor`)",
            file=sys.stderr,
        )
        return 1
    try:
        data = prepare_dirs(app_dirs(), need_write=args.command not in READ_ONLY_COMMANDS)
    except DataDirError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    setup_logging(data, full_screen=args.command is None)
    for note in data.notes:
        print(f"note: {note}", file=sys.stderr)
    # A full disk: the commands that only read open the database read-only (opening it for
    # writing needs room for its write-ahead log), so an export still gets the story out.
    args.read_only = not data.writable or (
        args.command in READ_ONLY_COMMANDS and disk_full(data.dirs.data)
    )
    try:
        settings = load_settings()
        add_secrets(settings)
        if data.writable and args.db is None and settings.db is not None:
            changed = make_private(db_files(settings.db_path(data.dirs)))
            if changed:
                print(f"note: {private_note(changed)}", file=sys.stderr)
        handlers = {
            "chat": _chat,
            "eval": _eval,
            "characters": _characters,
            "conversations": _conversations,
            "search": _search,
            "memory": _memory,
            "import": _import,
            "export": _export,
            "doctor": _doctor,
            "settings": _settings,
            "quick-replies": _quick_replies,
            "personas": _personas,
            "rename": _rename,
            "delete": _delete,
            "duplicate": _branch,
            "branch": _branch,
        }
        if args.command is None:
            return _tui(args, settings)
        with guarded_stdout():
            return handlers[args.command](args, settings)
    except USER_ERRORS as exc:
        say(f"error: {exc}", stream=sys.stderr)
        log.info("user error: %s", exc)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
