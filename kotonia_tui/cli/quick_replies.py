"""`kotonia quick-replies`: list, add, delete and import the player's quick replies."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kotonia_tui.chat.bootstrap import open_library, open_store
from kotonia_tui.chatfiles.st_quick_replies import read_quick_reply_set
from kotonia_tui.cli.output import UserError, json_text, say
from kotonia_tui.config import Settings
from kotonia_tui.domain import QuickReply
from kotonia_tui.terminal_text import visible


def quick_replies(args: argparse.Namespace, settings: Settings) -> int:
    key = open_library(settings).find(args.character).key if args.character else None
    if (args.add is None) != (args.text is None):
        raise UserError("--add LABEL and --text TEXT go together")
    with open_store(settings, args.db, read_only=args.read_only) as store:
        if args.delete is not None:
            store.delete_quick_reply(args.delete)
            say(f"deleted quick reply {args.delete}", stream=sys.stderr)
            return 0
        if args.add is not None:
            made = store.add_quick_reply(
                QuickReply(character_key=key, label=args.add, text=args.text, send=not args.insert)
            )
            print(made.id)
            return 0
        if args.import_file is not None:
            replies, skipped = read_quick_reply_set(Path(args.import_file), key)
            for reply in replies:
                print(store.add_quick_reply(reply).id)
            note = f"; {_replies(skipped, 'slash-command')} left out" if skipped else ""
            say(f"imported {_replies(len(replies), 'quick')}{note}", stream=sys.stderr)
            return 0
        listed = store.quick_replies([key] if key else [])
    rows = [
        {
            "id": q.id,
            "character": q.character_key,
            "label": q.label,
            "text": q.text,
            "send": q.send,
        }
        for q in listed
    ]
    if args.json:
        print(json_text(rows))
    else:
        for q in listed:
            fields = (q.id, q.character_key or "global", "send" if q.send else "insert", q.label)
            print("\t".join(visible(str(f), one_line=True) for f in fields))
    return 0


def _replies(n: int, kind: str) -> str:
    return f"{n} {kind} {'reply' if n == 1 else 'replies'}"
