"""`kotonia rename`, `delete`, `duplicate` and `branch`: conversations changed without the
model, as the app's conversations screen changes them."""

from __future__ import annotations

import argparse
import sys

from kotonia_tui.chat.bootstrap import open_library, open_store
from kotonia_tui.chat.managing import ConversationManager
from kotonia_tui.chat.personas import PersonaBook
from kotonia_tui.cli.output import UserError, plural, say
from kotonia_tui.config import Settings
from kotonia_tui.store import Store
from kotonia_tui.store.branching import Branched


def _manager(store: Store, settings: Settings) -> ConversationManager:
    return ConversationManager(store, open_library(settings), PersonaBook(store, settings.persona))


def rename(args: argparse.Namespace, settings: Settings) -> int:
    with open_store(settings, args.db) as store:
        conv = _manager(store, settings).rename(args.id, args.title)
    say(f"conversation {conv.id} is now titled {conv.title!r}", stream=sys.stderr)
    return 0


def delete(args: argparse.Namespace, settings: Settings) -> int:
    with open_store(settings, args.db) as store:
        conv = _manager(store, settings).delete_now(args.id)
    say(
        f"deleted conversation {conv.id} with {conv.character_name} "
        f"({plural(conv.message_count, 'message')}, its memory, fold jobs and saved states)",
        stream=sys.stderr,
    )
    return 0


def _carried(branched: Branched) -> str:
    """The copied chapters and the ledger entries they wrote ("2 chapters and 3 ledger
    entries")."""
    chapters = plural(branched.chapters, "chapter")
    if not branched.ledger_entries:
        return chapters
    n = branched.ledger_entries
    return f"{chapters} and {n} ledger {'entry' if n == 1 else 'entries'}"


def branch(args: argparse.Namespace, settings: Settings) -> int:
    """`duplicate` (the whole conversation) and `branch` (up to a message)."""
    with open_store(settings, args.db) as store:
        manager = _manager(store, settings)
        if args.command == "duplicate":
            branched = manager.duplicate(args.id, args.title or "")
        else:
            number = args.message.removeprefix("#")
            if not number.isdigit():
                raise UserError(
                    f"MESSAGE is a message number as the app shows it (#12 or 12), "
                    f"not {args.message!r}"
                )
            branched = manager.branch_at_number(args.id, int(number), args.title or "")
    conv = branched.conversation
    print(conv.id)
    memory = (
        "the memory carried over as it was"
        if branched.memory_shared
        else f"{_carried(branched)} carried over, applied on its next turn"
        if branched.chapters
        else "nothing folded yet"
    )
    say(
        f"conversation {conv.id} {conv.title!r}: {plural(branched.messages, 'message')} "
        f"of conversation {args.id}; {memory}",
        stream=sys.stderr,
    )
    return 0
