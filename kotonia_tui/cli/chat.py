"""`kotonia chat`: a conversation line by line in the terminal, or `--say` turns for scripts."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from kotonia_tui.characters import CharacterCard
from kotonia_tui.chat.bootstrap import open_library, open_service, open_store
from kotonia_tui.chat.errors import PersonaError
from kotonia_tui.chat.events import (
    FoldProgress,
    FoldWait,
    MemoryNotice,
    ReplyDelta,
    ServiceEvent,
)
from kotonia_tui.chat.images import read_image
from kotonia_tui.chat.library import CharacterLibrary
from kotonia_tui.chat.personas import PersonaBook, check_name
from kotonia_tui.chat.service import ChatService
from kotonia_tui.chat.turn import Turn
from kotonia_tui.cli.chat_commands import (
    CommandError,
    command_of,
    message_text,
    run_command,
    show_recent,
)
from kotonia_tui.cli.output import TypedText, UserError, progress, say
from kotonia_tui.config import Settings
from kotonia_tui.domain import Conversation, MessageStatus, ReplyOrder, Role, StoredPersona
from kotonia_tui.terminal_text import visible

# Said on standard error after the speaker's name when a `--say` reply's first words come.
REPLYING = "is replying…"


async def run_chat(args: argparse.Namespace, settings: Settings) -> int:
    err = sys.stderr
    typed = TypedText()  # for what is typed on standard input; the arguments are text already
    # Everything the user could have typed wrong is checked before the model loads.
    library = open_library(settings)
    card = library.find(args.character)
    others = _others(library, card, args.with_)
    if args.persona is not None:
        args.persona = check_name(args.persona)
    for text in args.say:
        if not text.strip() and not args.image:
            raise UserError("--say got an empty message; nothing was sent")
    for image in args.image:
        read_image(Path(image))  # a FIFO, a device or a broken picture: said before the model
    if args.conversation is not None:
        with open_store(settings, args.db) as store:
            conv = store.get_conversation(args.conversation)
            _check_conversation(
                conv, [m.character_key for m in store.cast(conv.id)], card, settings
            )
    service = await asyncio.to_thread(open_service, settings, db=args.db, progress=progress(err))
    closing = "the chat ended"
    try:
        await service.start()
        service.subscribe(lambda event: _print_event(event, err))
        card = service.library.find(args.character)
        others = [service.library.find(other.key) for other in others]
        persona = _persona(service.personas, args.persona) if args.persona else None
        if args.conversation is not None:
            conv = service.store.get_conversation(args.conversation)
            if not args.say:
                show_recent(service, conv.id)  # where the story stands, before the first line
            if persona is not None and persona.id != conv.persona_id:
                conv = service.manager.set_persona(conv.id, persona.id)
                say(
                    f"conversation {conv.id} is now played as {persona.name} (its setup is "
                    "read again on this turn)",
                    stream=err,
                )
            cast = {m.character_key for m in service.store.cast(conv.id)}
            for other in others:
                if other.key not in cast:
                    service.groups.add_member(conv.id, other)
                    say(f"{other.name} joined conversation {conv.id}", stream=err)
        elif others:
            conv = service.groups.new_group([card, *others], persona=persona)
            names = ", ".join(c.name for c in [card, *others])
            say(f"conversation {conv.id} with {names}", stream=err)
            if not args.say:
                for greeting in service.store.recent_messages(conv.id, len(others) + 1):
                    say(f"{greeting.speaker}: {greeting.text}\n")
        else:
            conv = service.new_conversation(card, greeting=args.greeting, persona=persona)
            say(f"conversation {conv.id} with {card.name}", stream=err)
            opening = service.store.last_message(conv.id)
            if opening is not None and not args.say:
                say(f"{opening.speaker}: {opening.text}\n")
        if args.order is not None:
            service.store.set_reply_order(conv.id, ReplyOrder(args.order))
        images = [service.attach_image(Path(p)) for p in args.image]
        if args.say and service.groups.is_group(conv.id):
            for index, text in enumerate(args.say):
                await _say_group(service, conv.id, text, images if index == 0 else [], args)
        elif args.say:
            for index, text in enumerate(args.say):
                await _say(service, conv.id, text, images if index == 0 else [], args)
        elif service.groups.is_group(conv.id):
            await _interactive_group(service, conv.id, images, args, typed)
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


def _persona(book: PersonaBook, name: str) -> StoredPersona:
    """The persona called `name`, made (and said so) when there is none yet."""
    try:
        return book.find(name)
    except PersonaError:
        made = book.for_name(name)
        say(f"note: made a new persona {made.name!r} (no description)", stream=sys.stderr)
        return made


def _others(
    library: CharacterLibrary, card: CharacterCard, names: list[str]
) -> list[CharacterCard]:
    """The cards `--with` names, each once and none of them the conversation's own."""
    others: list[CharacterCard] = []
    for name in names:
        other = library.find(name)
        if other.key == card.key or other in others:
            raise UserError(f"--with {name}: {other.name} ({other.key}) is in the group already")
        others.append(other)
    return others


def _check_conversation(
    conv: Conversation, cast: list[str], card: CharacterCard, settings: Settings
) -> None:
    """A conversation is continued only with its own card (by key, or by name for a chat
    filed under the character's name), or in a group with one of its members."""
    if len(cast) > 1:
        if card.key not in cast:
            raise UserError(
                f"conversation {conv.id} is a group of {', '.join(cast)}; {card.name} "
                f"(card {card.key}) is not in it (--with {card.key} adds it)"
            )
        return
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
    await _print_turn(await service.send(conv_id, text, images), args, named=False)


async def _print_turn(turn: Turn, args: argparse.Namespace, *, named: bool) -> None:
    """One reply on standard output ("Name: text" when `named`), a cut reply's reason on
    standard error; a turn that failed raises its error. While it is written, "Name is
    replying…" on standard error once its first words have come: the reply prints only when
    it ends, and from then on Ctrl-C has something to keep (before, it stores no reply)."""
    replying = False
    async for event in turn:
        if not replying and isinstance(event, ReplyDelta) and event.text:
            say(f"{turn.setup.display_name} {REPLYING}", stream=sys.stderr, one_line=True)
            replying = True
    done = await turn.wait()
    if done.reply is not None:
        say(f"{done.reply.speaker}: {done.reply.text}" if named else done.reply.text)
        if done.reply.status is not MessageStatus.COMPLETE:
            say(f"[{done.reply.status_reason}]", stream=sys.stderr)
    if args.stats:
        _print_stats(turn)
    if done.error:
        raise UserError(done.error)


async def _say_group(
    service: ChatService, conv_id: int, text: str, images: list[str], args: argparse.Namespace
) -> None:
    """The group's replies to `text`, each as "Name: text" on standard output."""
    run = await service.groups.send(conv_id, text, tuple(images))
    async for turn in run:
        await _print_turn(turn, args, named=True)


async def _interactive_group(
    service: ChatService,
    conv_id: int,
    images: list[str],
    args: argparse.Namespace,
    typed: TypedText,
) -> None:
    print(
        "Type a message and press Enter; the group answers by its order. Ctrl-C stops the "
        "replies, Ctrl-D quits.",
        file=sys.stderr,
    )
    user = visible(service.persona_of(service.store.get_conversation(conv_id)).name, one_line=True)
    while True:
        try:
            text = typed(await _read_line(f"{user}: "), "standard input")
        except EOFError:
            print(file=sys.stderr)
            return
        if not text.strip() and not images:
            continue
        run = await service.groups.send(conv_id, text, tuple(images))
        images = []
        async for turn in run:
            await _stream_reply(turn, turn.setup.display_name, stats=args.stats, stop=run.stop)


async def _interactive(
    service: ChatService,
    conv_id: int,
    name: str,
    images: list[str],
    args: argparse.Namespace,
    typed: TypedText,
) -> None:
    print(
        "Type a message and press Enter; Ctrl-C stops a reply, Ctrl-D quits, /help lists the "
        "commands.",
        file=sys.stderr,
    )
    user = visible(service.persona_of(service.store.get_conversation(conv_id)).name, one_line=True)
    if isinstance(sys.stdin, io.TextIOWrapper):
        sys.stdin.reconfigure(errors="surrogateescape")  # bad bytes reach `typed`, not a crash
    while True:
        try:
            text = typed(await _read_line(f"{user}: "), "standard input")
        except EOFError:
            print(file=sys.stderr)
            return
        command = command_of(text)
        if command is not None:
            try:
                found = await run_command(service, conv_id, *command)
            except CommandError as exc:
                say(f"error: {exc}", stream=sys.stderr)
                continue
            if found is None:
                continue
            turn = found
        elif text.strip() or images:
            turn = await service.send(conv_id, message_text(text), images)
            images = []
        else:
            last = service.store.last_message(conv_id)
            if last is not None and last.role is Role.CHARACTER:
                continue
            turn = await service.answer(conv_id)  # an empty line answers the user's last message
        await _stream_reply(turn, name, stats=args.stats)


async def _stream_reply(
    turn: Turn, name: str, *, stats: bool, stop: Callable[[], None] | None = None
) -> None:
    """One reply of an interactive chat as it streams: "Name: " and the text on standard
    output, Ctrl-C stopping it (`stop`: the group's run too), then on standard error how it
    ended when it did not complete, its error, and with `stats` its figures."""
    say(f"{name}: ", end="", one_line=True)
    with _ctrl_c_stops(turn, stop):
        async for event in turn:
            if isinstance(event, ReplyDelta):
                say(event.text, end="")
    print()
    done = await turn.wait()
    if done.reply is not None and done.reply.status is not MessageStatus.COMPLETE:
        say(f"[{done.reply.status_reason}]", stream=sys.stderr)
    if done.error:
        say(f"error: {done.error}", stream=sys.stderr)
    if stats:
        _print_stats(turn)


def _print_stats(turn: Turn) -> None:
    """The turn's figures (`Turn.stats()`: the model call's, what the memory did on this turn,
    the message ids it recalled) as one JSON line on standard error; none for a turn that made
    no model call."""
    figures = turn.stats()
    if figures is not None:
        print(json.dumps(figures), file=sys.stderr, flush=True)


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
def _ctrl_c_stops(turn: Turn, stop: Callable[[], None] | None = None) -> Iterator[None]:
    """While a reply streams, Ctrl-C stops it (what was written is stored, marked as stopped)
    and the chat goes on; before and after, Ctrl-C is asyncio's own (it ends the program).
    In a group, `stop` ends the run of replies too."""
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(signal.SIGINT)

    def stopped() -> None:
        if stop is not None:
            stop()
        turn.interrupt("Ctrl-C")

    try:
        loop.add_signal_handler(signal.SIGINT, stopped)
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
    if isinstance(event, FoldWait) and event.progress:
        return  # the start and the end of a wait are said; its progress is the app's
    if isinstance(event, MemoryNotice | FoldWait):
        say(f"note: {event.text}", stream=stream)
    elif isinstance(event, FoldProgress):
        detail = f": {event.detail}" if event.detail else ""
        # "fold: chapter #1-#14 landed: ...": the job by its kind and range in message numbers
        # (chat/numbering.py `told`), as the app names it; its store id is no use to a reader
        # (no command takes it) and would read as a message number.
        say(f"fold: {event.job_label} {event.state}{detail}", stream=stream)
