"""`kotonia search`: messages found by their words in every conversation (or one), message id
first, as the app's search screen finds them."""

from __future__ import annotations

import argparse

from kotonia_tui.chat.bootstrap import open_store
from kotonia_tui.chat.search import search as search_messages
from kotonia_tui.cli.output import json_text
from kotonia_tui.config import Settings
from kotonia_tui.store import SearchOrder
from kotonia_tui.terminal_text import visible


def search(args: argparse.Namespace, settings: Settings) -> int:
    order = SearchOrder.NEWEST if args.newest else SearchOrder.RANK
    with open_store(settings, args.db, read_only=args.read_only) as store:
        if args.conversation is not None:
            store.get_conversation(args.conversation)  # an unknown id is an error, not "none"
        results = search_messages(
            store, args.query, conversation_id=args.conversation, limit=args.limit, order=order
        )
    rows = [
        {
            "message": r.hit.message_id,
            "conversation": r.hit.conversation_id,
            "number": r.number,
            "character": r.conversation.character_key,
            "character_name": r.conversation.character_name,
            "title": r.conversation.title,
            "speaker": r.hit.speaker,
            "role": r.hit.role.value,
            "created": r.hit.created_at.isoformat(timespec="seconds"),
            "snippet": r.snippet.text,
            "text": r.hit.text,
        }
        for r in results
    ]
    if args.json:
        print(json_text(rows))
    else:
        for row, result in zip(rows, results, strict=True):
            shown = ("…" if result.snippet.cut_before else "") + result.snippet.text
            shown += "…" if result.snippet.cut_after else ""
            fields = (
                row["message"],
                row["conversation"],
                f"#{row['number']}",
                row["speaker"],
                row["created"],
                shown,
            )
            print("\t".join(visible(str(f), one_line=True) for f in fields))
    return 0
