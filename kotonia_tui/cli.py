"""The `kotonia` command: the TUI by default, plus chat, characters, conversations, memory, import,
export, eval and doctor for scripts.

Conventions (docs/cli.md, relied on by scripts): list commands print one item per line, the id
or name first (`--json` for JSON); `chat --say` prints only the reply on standard output
(progress and figures go to standard error); exit status 0 on success, 1 on a user-facing error
(one line on standard error), 2 on wrong usage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import logging
import os
import platform
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from kotonia_tui import __version__
from kotonia_tui.characters import CharacterCard
from kotonia_tui.chat.bootstrap import open_library, open_service, open_store
from kotonia_tui.chat.events import FoldProgress, MemoryNotice, ReplyDelta, ServiceEvent
from kotonia_tui.chat.images import AttachmentError
from kotonia_tui.chat.importing import import_chat_file
from kotonia_tui.chat.library import UnknownCharacterError
from kotonia_tui.chat.memory_report import memory_lines, memory_report
from kotonia_tui.chat.reader import ConversationReader
from kotonia_tui.chat.service import ChatError, ChatService
from kotonia_tui.chat.startup import (
    DataDirError,
    add_secrets,
    db_files,
    make_private,
    prepare_dirs,
    private_note,
    redact,
    setup_logging,
)
from kotonia_tui.chat.turn import Turn
from kotonia_tui.chatfiles import ImportFormatError, write_sillytavern
from kotonia_tui.config import ConfigError, Settings, app_dirs, load_settings
from kotonia_tui.domain import Conversation, MessageStatus, Role
from kotonia_tui.engine import EngineError, EngineInfo, gpu_offload_supported, llama_cpp_version
from kotonia_tui.engine.default_model import default_model_state
from kotonia_tui.engine.model_files import check_gguf
from kotonia_tui.engine.server.credentials import redact_url
from kotonia_tui.eval.command import add_arguments as add_eval_arguments
from kotonia_tui.eval.command import run_command as run_eval_command
from kotonia_tui.safe_files import WriteError, replacing
from kotonia_tui.store import SCHEMA_VERSION, StoreError
from kotonia_tui.terminal_text import escape_json_controls, visible
from kotonia_tui.untrusted_text import replacement_note, scrub

log = logging.getLogger("kotonia")


def say(
    text: str, *, stream: TextIO | None = None, end: str = "\n", one_line: bool = False
) -> None:
    """Print text that may come from a card, a chat file, a model or a server: its control
    and escape characters are shown (␛, ⟨U+202E⟩), never sent to the terminal raw; the API
    keys the profiles name are redacted."""
    print(visible(redact(text), one_line=one_line), end=end, file=stream or sys.stdout, flush=True)


class UserError(Exception):
    """A problem the user can fix; printed as one line, exit status 1."""


USER_ERRORS: tuple[type[Exception], ...] = (
    UserError,
    ConfigError,
    EngineError,
    StoreError,
    ImportFormatError,
    ChatError,
    AttachmentError,
    UnknownCharacterError,
    WriteError,
)


def _progress(stream: TextIO) -> Any:
    last: dict[str, int] = {}
    live = stream.isatty()

    def report(what: str, done: int, total: int) -> None:
        percent = int(done * 100 / total) if total else 100
        # On a terminal the line updates in place; in a log, one line per quarter.
        step = percent if live else percent - percent % 25
        if last.get(what) == step:
            return
        last[what] = step
        if total > 1:
            end = "\n" if done >= total or not live else "\r"
            say(f"{what}: {step}%", stream=stream, end=end, one_line=True)
        else:
            say(what, stream=stream, one_line=True)

    return report


# ---- chat ----------------------------------------------------------------------------------


class _TypedText:
    """What the user typed (arguments, a pipe) under the one Unicode policy: bytes that are not
    UTF-8 become U+FFFD and the message is sent anyway; said once per run."""

    def __init__(self) -> None:
        self.said = False

    def __call__(self, text: str, where: str) -> str:
        decoded = scrub(text)  # undecodable bytes arrive as surrogate escapes
        if decoded.replaced and not self.said:
            self.said = True
            print(f"note: {where}: {replacement_note(decoded.replaced)}", file=sys.stderr)
        return decoded.text


async def _chat(args: argparse.Namespace, settings: Settings) -> int:
    err = sys.stderr
    typed = _TypedText()
    args.character = typed(args.character, "the character name")
    args.say = [typed(text, "--say") for text in args.say]
    # Everything the user could have typed wrong is checked before the model loads.
    card = open_library(settings).find(args.character)
    for text in args.say:
        if not text.strip() and not args.image:
            raise UserError("--say got an empty message; nothing was sent")
    if args.conversation is not None:
        with open_store(settings, args.db) as store:
            _check_conversation(store.get_conversation(args.conversation), card, settings)
    service = await asyncio.to_thread(open_service, settings, db=args.db, progress=_progress(err))
    closing = "the chat ended"
    try:
        await service.start()
        service.subscribe(lambda event: _print_event(event, err))
        card = service.library.find(args.character)
        if args.conversation is not None:
            conv = service.store.get_conversation(args.conversation)
        else:
            conv = service.new_conversation(card, greeting=args.greeting)
            say(f"conversation {conv.id} with {card.name}", stream=err)
            opening = service.store.last_message(conv.id)
            if opening is not None and not args.say:
                say(f"{opening.speaker}: {opening.text}\n")
        images = [service.attach_image(Path(p)) for p in args.image]
        if args.say:
            for index, text in enumerate(args.say):
                await _say(service, conv.id, text, images if index == 0 else [], args)
        else:
            await _interactive(service, conv.id, card.display_name, images, args, typed)
        if args.wait_folds:
            # A script sees the memory settle: the folds this run queued have run.
            await service.worker.wait_settled(conv.id)
        return 0
    except asyncio.CancelledError:
        closing = "Ctrl-C"  # asyncio.run cancels the chat on Ctrl-C; a reply still running stops
        raise
    finally:
        await service.close(closing)


def _check_conversation(conv: Conversation, card: CharacterCard, settings: Settings) -> None:
    """A conversation is continued only with its own card (by key, or by name for a chat
    filed under the character's name)."""
    found = open_library(settings).card_of(conv.character_key, conv.character_name)
    if found is None or found.key != card.key:
        raise UserError(
            f"conversation {conv.id} is with {conv.character_name} "
            f"(card {found.key if found else conv.character_key}), not with {card.name} "
            f"(card {card.key})"
        )


async def _say(
    service: ChatService, conv_id: int, text: str, images: list[str], args: argparse.Namespace
) -> None:
    turn = await service.send(conv_id, text, images)
    done = await turn.wait()
    if done.reply is not None:
        say(done.reply.text)
        if done.reply.status is not MessageStatus.COMPLETE:
            say(f"[{done.reply.status_reason}]", stream=sys.stderr)
    if args.stats and done.metrics is not None:
        print(json.dumps(done.metrics.stats_dict()), file=sys.stderr, flush=True)
    if done.error:
        raise UserError(done.error)


async def _interactive(
    service: ChatService,
    conv_id: int,
    name: str,
    images: list[str],
    args: argparse.Namespace,
    typed: _TypedText,
) -> None:
    print("Type a message and press Enter; Ctrl-C stops a reply, Ctrl-D quits.", file=sys.stderr)
    user = visible(service.persona_of(service.store.get_conversation(conv_id)).name, one_line=True)
    if isinstance(sys.stdin, io.TextIOWrapper):
        sys.stdin.reconfigure(errors="surrogateescape")  # bad bytes reach `typed`, not a crash
    while True:
        try:
            text = typed(await _read_line(f"{user}: "), "standard input")
        except EOFError:
            print(file=sys.stderr)
            return
        if text.strip() or images:
            turn = await service.send(conv_id, text, images)
        else:
            last = service.store.last_message(conv_id)
            if last is not None and last.role is Role.CHARACTER:
                continue
            turn = await service.answer(conv_id)  # an empty line answers the user's last message
        images = []
        say(f"{name}: ", end="", one_line=True)
        with _ctrl_c_stops(turn):
            async for event in turn:
                if isinstance(event, ReplyDelta):
                    say(event.text, end="")
        print()
        done = await turn.wait()
        if done.reply is not None and done.reply.status is not MessageStatus.COMPLETE:
            say(f"[{done.reply.status_reason}]", stream=sys.stderr)
        if done.error:
            say(f"error: {done.error}", stream=sys.stderr)
        if args.stats and done.metrics is not None:
            print(json.dumps(done.metrics.stats_dict()), file=sys.stderr, flush=True)


async def _read_line(prompt: str) -> str:
    """`input()` on a daemon thread. On a pool thread (asyncio.to_thread), Ctrl-C at the prompt
    left the program waiting for Enter: exiting waits for every pool thread to finish."""
    loop = asyncio.get_running_loop()
    line: asyncio.Future[str] = loop.create_future()

    def deliver(text: str | None, error: BaseException | None) -> None:
        if line.done():
            return
        if error is not None:
            line.set_exception(error)
        else:
            line.set_result(text or "")

    def read() -> None:
        text: str | None = None
        error: BaseException | None = None
        try:
            text = input(prompt)
        except (EOFError, OSError, ValueError) as exc:  # Ctrl-D, or stdin closed
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits any more
            loop.call_soon_threadsafe(deliver, text, error)

    threading.Thread(target=read, name="kotonia-input", daemon=True).start()
    return await line


@contextmanager
def _ctrl_c_stops(turn: Turn) -> Iterator[None]:
    """While a reply streams, Ctrl-C stops it (what was written is stored, marked as stopped)
    and the chat goes on; before and after, Ctrl-C is asyncio's own (it ends the program)."""
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(signal.SIGINT)
    try:
        loop.add_signal_handler(signal.SIGINT, turn.interrupt, "Ctrl-C")
    except (NotImplementedError, RuntimeError, ValueError):
        # No signal handling here (not the main thread, or no such support on the platform):
        # Ctrl-C ends the program, and closing the service still stores the reply.
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, previous)


def _print_event(event: ServiceEvent, stream: TextIO) -> None:
    if isinstance(event, MemoryNotice):
        say(f"note: {event.text}", stream=stream)
    elif isinstance(event, FoldProgress):
        detail = f": {event.detail}" if event.detail else ""
        say(f"fold {event.job.kind.value} #{event.job.id} {event.state}{detail}", stream=stream)


# ---- lists, import, export ------------------------------------------------------------------


def _characters(args: argparse.Namespace, settings: Settings) -> int:
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
        print(_json(rows))
    else:
        for row in rows:
            greetings = row["greetings"]
            assert isinstance(greetings, int)
            fields = (row["key"], row["name"], plural(greetings, "greeting"), row["path"])
            print("\t".join(visible(str(f), one_line=True) for f in fields))
    return 0


def _json(rows: object) -> str:
    """JSON for scripts: the exact text, with no control or bidi character raw in it."""
    return escape_json_controls(json.dumps(rows, ensure_ascii=False, indent=2))


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _conversations(args: argparse.Namespace, settings: Settings) -> int:
    library = open_library(settings)
    with open_store(settings, args.db, read_only=args.read_only) as store:
        if args.character:
            # The card's conversations, chats filed under its name included (as the app lists).
            convs = ConversationReader(store, library).conversations_of(
                library.find(args.character)
            )
        else:
            convs = store.list_conversations()
    rows = [
        {
            "id": c.id,
            "character": c.character_key,
            "character_name": c.character_name,
            "messages": c.message_count,
            "updated": c.updated_at.isoformat(timespec="seconds"),
            "title": c.title,
        }
        for c in convs
    ]
    if args.json:
        print(_json(rows))
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


def _memory(args: argparse.Namespace, settings: Settings) -> int:
    with open_store(settings, args.db, read_only=args.read_only) as store:
        report = memory_report(store, args.id)
    if args.json:
        print(_json(report))
    else:
        for line in memory_lines(report):
            print(visible(line, one_line=True))
    return 0


def _import(args: argparse.Namespace, settings: Settings) -> int:
    path = Path(args.file)
    library = open_library(settings)
    card = library.find(args.character) if args.character else None
    with open_store(settings, args.db) as store:
        imported = import_chat_file(
            store,
            path,
            settings.persona.name,
            card.name if card else None,
            card.key if card else None,
            match=library.match,
        )
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


def _export(args: argparse.Namespace, settings: Settings) -> int:
    with open_store(settings, args.db, read_only=args.read_only) as store:
        conv = store.get_conversation(args.id)
        messages = store.iter_messages(args.id)
        if args.output:
            out_path = Path(args.output)
            with replacing(out_path) as out:
                count = write_sillytavern(conv, messages, out, store.get_image)
            say(f"wrote {plural(count, 'message')} to {out_path}", stream=sys.stderr)
        else:
            write_sillytavern(conv, messages, sys.stdout, store.get_image)
    return 0


# ---- doctor ---------------------------------------------------------------------------------


def _doctor(args: argparse.Namespace, settings: Settings) -> int:
    dirs = app_dirs()
    profile = settings.active_profile()
    rows: list[tuple[str, str]] = [
        ("kotonia-tui", __version__),
        ("python", platform.python_version()),
        ("llama-cpp-python", llama_cpp_version()),
        ("config file", f"{dirs.config_file} ({'found' if dirs.config_file.exists() else 'none'})"),
        ("data dir", str(dirs.data)),
        ("cache dir", str(dirs.cache)),
        ("profile", f"{settings.profile}: {profile.description or '(custom)'}"),
        ("backend", profile.backend),
        ("prompt format", profile.prompt_format.value),
        ("n_ctx", str(profile.n_ctx)),
        ("reply reserve", f"{profile.reply_max_tokens} tokens"),
        ("thinking", "on" if profile.thinking else "off"),
        ("GPU offload", _gpu_line(profile.n_gpu_layers)),
    ]
    problems: list[str] = []
    if profile.backend == "server":
        rows.extend(_server_rows(profile, problems))
    elif profile.model_path is None:
        try:
            rows.append(("model", f"embedded default: {default_model_state(dirs.cache)}"))
        except EngineError as exc:
            problems.append(str(exc))
            rows.append(("model", "embedded default (problem)"))
    else:
        rows.append(("model", _file_line(profile.model_path, "model", problems)))
    if profile.backend == "server":
        pass  # images: the server's projector (shown above)
    elif profile.mmproj_path is not None:
        rows.append(("mmproj", _file_line(profile.mmproj_path, "mmproj", problems)))
    else:
        rows.append(("mmproj", "none (no image input)"))
    db_path = settings.db_path(dirs) if args.db is None else args.db
    try:
        with open_store(settings, args.db, read_only=args.read_only) as store:
            rows.append(("database", f"{db_path} (schema {store.schema_version})"))
            rows.append(("conversations", str(len(store.list_conversations()))))
    except StoreError as exc:
        problems.append(str(exc))
        rows.append(
            ("database", f"{db_path} (cannot open; this app knows schema {SCHEMA_VERSION})")
        )
    library = open_library(settings)
    rows.append(("character folders", ", ".join(str(f) for f in library.folders)))
    rows.append(("characters", f"{len(library.cards)} cards, {len(library.errors)} broken"))
    problems.extend(str(p) for p in library.errors)
    if args.load and not problems and profile.backend != "server":
        from kotonia_tui.chat.bootstrap import open_engine

        engine = open_engine(settings, _progress(sys.stderr))
        try:
            info = engine.info
            rows.append(("loaded", f"{info.model_name} in {info.load_ms:.0f} ms"))
            rows.append(("trained context", str(info.n_ctx_train)))
            rows.append(("chat template", "yes" if info.has_chat_template else "no"))
            if isinstance(info, EngineInfo):
                rows.append(("threads", str(info.threads)))
        finally:
            engine.close()
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        say(f"{name.ljust(width)}  {value}", one_line=True)
    for problem in problems:
        say(f"problem: {problem}", stream=sys.stderr)
    if profile.backend == "inprocess":
        for line in _how_to_get_files(settings.profile, profile, dirs.config_file):
            say(line, stream=sys.stderr)
    return 1 if problems else 0


def _how_to_get_files(name: str, profile: Any, config_file: Path) -> list[str]:
    """What to download and where to put it, when the profile's model files are missing."""
    files = [p for p in (profile.model_path, profile.mmproj_path) if p is not None]
    missing = [p for p in files if not p.exists()]
    if not missing:
        return []
    lines = [f"to use the profile {name!r}, download {' and '.join(p.name for p in missing)}"]
    if profile.download:
        lines.append(f"  from {profile.download}")
    folders = sorted({str(p.parent) for p in missing})
    lines += [
        f"and put them in {' and '.join(folders)}, or write where they are in {config_file}:",
        f"  profile = {json.dumps(name)}",
        "",
        f"  [profiles.{json.dumps(name)}]",
    ]
    keys = (("model_path", profile.model_path), ("mmproj_path", profile.mmproj_path))
    lines += [f"  {key} = {json.dumps(str(path))}" for key, path in keys if path is not None]
    lines.append("(KOTONIA_MODEL_PATH and KOTONIA_MMPROJ_PATH set them for one run)")
    return lines


def _server_rows(profile: Any, problems: list[str]) -> list[tuple[str, str]]:
    """The server backend: where it is, whether it answers, and what it reports."""
    import os

    from kotonia_tui.engine.server import ServerEngine

    key = "set" if os.environ.get(profile.api_key_env) else "not set (no key sent)"
    server = redact_url(profile.server_url) if profile.server_url else None
    rows = [
        ("server", server or "(none: set server_url)"),
        ("api key", f"${profile.api_key_env} {key}"),
    ]
    try:
        engine = ServerEngine.open(profile)
    except EngineError as exc:
        problems.append(str(exc))
        rows.append(("server answers", "no"))
        return rows
    try:
        info = engine.info
        rows.append(("server answers", f"yes, in {info.load_ms:.0f} ms ({info.kind})"))
        rows.append(("model", info.model_id))
        rows.append(("server n_ctx", f"{info.n_ctx} (from the {info.n_ctx_source})"))
        path = "rendered here, /v1/completions" if info.client_renders else "/v1/chat/completions"
        rows.append(("prompt", path))
        rows.append(("token counts", info.tokenizer))
        rows.append(("images", "yes" if engine.has_vision else "no"))
        rows.append(("read timeout", f"{info.read_timeout_s:.0f} s"))
        for warning in info.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    finally:
        engine.close()
    return rows


def _gpu_line(n_gpu_layers: int | None) -> str:
    supported = gpu_offload_supported()
    if n_gpu_layers is None:
        return f"{'all layers' if supported else 'none'} ({'GPU' if supported else 'CPU'} build)"
    return f"{n_gpu_layers} layers ({'GPU' if supported else 'CPU'} build)"


def _file_line(path: Path, what: str, problems: list[str]) -> str:
    try:
        check_gguf(path, what)
    except EngineError as exc:
        problems.append(str(exc))
        return f"{path} (problem)"
    return f"{path} ({path.stat().st_size / 1e9:.2f} GB)"


# ---- the app ----------------------------------------------------------------------------------


def _tui(args: argparse.Namespace, settings: Settings) -> int:
    from kotonia_tui.tui.app import run_app  # Textual loads only when the app opens

    return run_app(settings, db=args.db)


# ---- argument parsing -------------------------------------------------------------------------


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
        "--greeting", type=int, default=0, metavar="N", help="which greeting opens a new one (0)"
    )
    chat.add_argument(
        "--image", action="append", default=[], metavar="FILE", help="attach an image file"
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

    memory = sub.add_parser(
        "memory", help="print the memory the next turn of a conversation carries"
    )
    memory.add_argument("id", type=int, help="the conversation (see `kotonia conversations`)")
    memory.add_argument("--json", action="store_true", help="print it as JSON")

    imp = sub.add_parser("import", help="import a SillyTavern .jsonl chat or a JSON list")
    imp.add_argument("file", help="the chat file (.jsonl or .json)")
    imp.add_argument("--character", help="the card the conversation belongs to")

    exp = sub.add_parser("export", help="write a conversation as SillyTavern .jsonl")
    exp.add_argument("id", type=int, help="the conversation (see `kotonia conversations`)")
    exp.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE instead of standard output"
    )

    evaluate = sub.add_parser(
        "eval", help="measure forgetting: recall by fold range for each memory design, and audit"
    )
    add_eval_arguments(evaluate)

    doctor = sub.add_parser("doctor", help="check paths, model files, database and libraries")
    doctor.add_argument("--load", action="store_true", help="also load the model")

    return parser


# Commands that only read: they work on a read-only data dir.
READ_ONLY_COMMANDS = frozenset({"characters", "conversations", "memory", "export", "doctor"})


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    umask = os.umask(0o077)  # every file and folder this run creates is private to the user
    try:
        return _run(args)
    finally:
        os.umask(umask)


def _run(args: argparse.Namespace) -> int:
    try:
        data = prepare_dirs(app_dirs(), need_write=args.command not in READ_ONLY_COMMANDS)
    except DataDirError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    setup_logging(data, full_screen=args.command is None)
    for note in data.notes:
        print(f"note: {note}", file=sys.stderr)
    args.read_only = not data.writable
    try:
        settings = load_settings()
        add_secrets(settings)
        if data.writable and args.db is None and settings.db is not None:
            changed = make_private(db_files(settings.db_path(data.dirs)))
            if changed:
                print(f"note: {private_note(changed)}", file=sys.stderr)
        if args.command == "chat":
            return asyncio.run(_chat(args, settings))
        if args.command == "eval":
            return run_eval_command(args, settings)
        handlers = {
            "characters": _characters,
            "conversations": _conversations,
            "memory": _memory,
            "import": _import,
            "export": _export,
            "doctor": _doctor,
        }
        if args.command is None:
            return _tui(args, settings)
        return handlers[args.command](args, settings)
    except USER_ERRORS as exc:
        say(f"error: {exc}", stream=sys.stderr)
        log.info("user error: %s", exc)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
