"""The player's commands in the line-by-line `kotonia chat`, named as the app names its keys:
/regenerate (Ctrl+R), /swipe (the ←/→ versions), /continue (Ctrl+G), /edit (F4), and /help.

A line starting with "/" is a command, never sent to the character; "//" sends the line with
one "/" less. An unknown command or a wrong argument is one line on standard error naming it,
and nothing is sent. Messages are numbered as the app numbers them: by their place in the
conversation (`#3` is the third message there).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from kotonia_tui.chat.errors import ChatError
from kotonia_tui.chat.service import ChatService
from kotonia_tui.chat.turn import Turn
from kotonia_tui.cli.output import say
from kotonia_tui.domain import MessageStatus, Role, StoredMessage

RECENT_SHOWN = 6  # messages shown when an existing conversation is continued


class CommandError(Exception):
    """A command that cannot run as typed; the message is one line."""


@dataclass(frozen=True)
class Command:
    name: str
    usage: str
    help: str


COMMANDS = (
    Command("help", "/help", "these commands"),
    Command("regenerate", "/regenerate", "another version of the last reply (the app's Ctrl+R)"),
    Command(
        "swipe",
        "/swipe [back]",
        "the last reply's next version, or the one before with 'back'; past the newest, "
        "a new one is written (the app's → and ←)",
    ),
    Command("continue", "/continue", "carry on writing the last reply (the app's Ctrl+G)"),
    Command(
        "edit",
        "/edit [#N] TEXT",
        "replace the text of the last message, or of message #N (the app's F4)",
    ),
)
_BY_NAME = {command.name: command for command in COMMANDS}


def command_of(line: str) -> tuple[str, str] | None:
    """(name, the rest) when `line` is a command; None for a message ("//" escapes)."""
    stripped = line.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return None
    name, _, rest = stripped[1:].partition(" ")
    return name.lower(), rest.strip()


def message_text(line: str) -> str:
    """What a line that is not a command sends: "//text" sends "/text"."""
    return line.replace("//", "/", 1) if line.lstrip().startswith("//") else line


def help_lines() -> list[str]:
    width = max(len(c.usage) for c in COMMANDS)
    lines = [f"  {c.usage.ljust(width)}  {c.help}" for c in COMMANDS]
    return ["Commands (a line starting with // sends it with one / less):", *lines]


async def run_command(service: ChatService, conv_id: int, name: str, rest: str) -> Turn | None:
    """Run a command; a turn when it makes the character write (the caller streams it)."""
    if name not in _BY_NAME:
        raise CommandError(f"/{name} is not a command: /help lists them")
    if name == "help":
        for line in help_lines():
            say(line, stream=sys.stderr)
        return None
    try:
        if name == "regenerate":
            _no_argument(name, rest)
            return await service.regenerate(conv_id)
        if name == "continue":
            _no_argument(name, rest)
            return await service.continue_reply(conv_id)
        if name == "swipe":
            return await _swipe(service, conv_id, rest)
        _edit(service, conv_id, rest)
        return None
    except ChatError as exc:
        raise CommandError(f"/{name}: {exc}") from exc


def _no_argument(name: str, rest: str) -> None:
    if rest:
        raise CommandError(f"/{name} takes nothing after it, got {rest!r}")


async def _swipe(service: ChatService, conv_id: int, rest: str) -> Turn | None:
    if rest not in ("", "back"):
        raise CommandError(f"/swipe takes 'back' or nothing, got {rest!r}")
    last = service.store.last_message(conv_id)
    if last is None or last.id is None or last.role is not Role.CHARACTER:
        raise CommandError("/swipe: the last message is not a reply of the character's")
    count = max(1, len(last.alternatives))
    index = last.chosen + (-1 if rest == "back" else 1)
    if index < 0:
        raise CommandError("/swipe back: this is the first version (/swipe goes to newer ones)")
    if index >= count:
        return await service.regenerate(conv_id)  # past the newest: write another
    chosen = service.choose_alternative(last.id, index)
    say(f"{chosen.speaker}: {chosen.text}")
    say(f"(version {index + 1} of {count})", stream=sys.stderr)
    return None


def _edit(service: ChatService, conv_id: int, rest: str) -> None:
    number: int | None = None
    if rest.startswith("#"):
        label, _, rest = rest.partition(" ")
        if not label[1:].isdigit():
            raise CommandError(f"/edit: {label!r} is not a message number (#12)")
        number = int(label[1:])
    text = rest.strip()
    if not text:
        raise CommandError("/edit needs the new text: /edit [#N] TEXT")
    store = service.store
    if number is None:
        last = store.last_message(conv_id)
        message_id = last.id if last is not None else None
    else:
        message_id = store.message_id_at(conv_id, number)
    if message_id is None:
        where = f"#{number}" if number is not None else "a last message"
        raise CommandError(f"/edit: the conversation has no {where}")
    edited = service.edit_message(message_id, text)
    shown = number or store.message_numbers(conv_id, [message_id])[message_id]
    say(f"#{shown} edited: {edited.speaker}: {edited.text}", stream=sys.stderr)


def show_recent(service: ChatService, conv_id: int, count: int = RECENT_SHOWN) -> None:
    """The last messages of a conversation being continued, numbered as the app numbers them,
    each stopped or cut reply marked as the app marks it."""
    store = service.store
    recent = store.recent_messages(conv_id, count)
    if not recent:
        return
    first = recent[0].id or 0
    number = store.message_numbers(conv_id, [first]).get(first, 1)
    if number > 1:
        say(f"({number - 1} earlier messages)", stream=sys.stderr)
    for offset, message in enumerate(recent):
        _show(number + offset, message)


def _show(number: int, message: StoredMessage) -> None:
    say(f"#{number} {message.speaker}: {message.text}")
    if message.status is not MessageStatus.COMPLETE and message.status_reason:
        say(f"[{message.status_reason}]")
