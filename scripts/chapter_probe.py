"""Fold ranges of stories into structured chapters on the real model and print what they keep.

A quick measuring loop for the chronicler (issue 15): each range is one chapter call (and its
readback retry) through the same `chronicle` the fold worker uses, with the live ledger carried
from range to range as the fold worker carries it (so a later range can close a thread or
replace a fact). For each chapter it prints the rendered text, the ledger entries it adds and
ends, and the readback's misses; at the end, the live ledger.

    .venv/bin/python scripts/chapter_probe.py                      # the default stories
    .venv/bin/python scripts/chapter_probe.py STORY.json --range 1-20 --range 21-40

A story is a dataset file as `kotonia eval` reads it (assets/eval/*.json, a SillyTavern chat).
Without one: the shipped dataset (a few ranges) and scripts/stories/bindery.json (a story
written for this probe, so the chronicler is not judged on one story only). The model is the
active profile's (the embedded default unless KOTONIA_MODEL_PATH or the config says otherwise).
`--json OUT` writes every chapter as JSON. Exit 1 with one line when a story cannot be read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from kotonia_tui.chat.bootstrap import open_engine
from kotonia_tui.chat.fold.chronicle import chronicle
from kotonia_tui.config import load_settings
from kotonia_tui.domain import LedgerEnd, Message, StoredLedgerEntry
from kotonia_tui.engine import Engine
from kotonia_tui.eval.dataset import DatasetError, EvalConversation, load_file
from kotonia_tui.memory.chronicler import Cast, ChronicleRequest
from kotonia_tui.memory.ledger import entry_line
from kotonia_tui.memory.structured import ledger_changes

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STORIES: tuple[tuple[Path, tuple[tuple[int, int], ...]], ...] = (
    (ROOT / "assets/eval/lighthouse.json", ((1, 32), (33, 51), (52, 69), (215, 233))),
    (ROOT / "scripts/stories/bindery.json", ((1, 12), (13, 22))),
)


def _range(text: str) -> tuple[int, int]:
    first, sep, last = text.partition("-")
    if not sep or not first.isdigit() or not last.isdigit() or int(first) > int(last):
        raise argparse.ArgumentTypeError(f"{text!r}: expected FIRST-LAST message ids, e.g. 1-32")
    return int(first), int(last)


class Ledger:
    """The ledger as the fold worker keeps it, in memory: ids in order, entries ended by label."""

    def __init__(self) -> None:
        self.entries: list[StoredLedgerEntry] = []

    def live(self) -> list[StoredLedgerEntry]:
        return [e for e in self.entries if e.ended_by_chapter_id is None]

    def apply(self, reply_structure: Any, chapter_no: int) -> tuple[list[str], list[str]]:
        entries, endings = ledger_changes(reply_structure, 1, self.live())
        ended = []
        for ending in endings:
            entry = next(e for e in self.entries if e.id == ending.entry_id)
            entry.ended_by_chapter_id = chapter_no
            entry.end = ending.end
            word = "resolved" if ending.end is LedgerEnd.RESOLVED else "superseded"
            ended.append(f"{entry.label} {word}: {ending.note}")
        added = []
        for entry in entries:
            stored = StoredLedgerEntry(
                **{**entry.model_dump(), "id": len(self.entries) + 1, "chapter_id": chapter_no}
            )
            self.entries.append(stored)
            added.append(entry_line(stored))
        return added, ended


async def probe_story(
    engine: Engine, story: EvalConversation, ranges: list[tuple[int, int]], max_output: int
) -> list[dict[str, Any]]:
    cast = Cast(story.character.name, story.user.name)
    messages = [
        Message(id=m.id, role=m.role, speaker=m.speaker, text=m.text) for m in story.messages
    ]
    ledger = Ledger()
    rows = []
    for number, (first, last) in enumerate(ranges, start=1):
        source = [m for m in messages if first <= (m.id or 0) <= last]
        if not source:
            print(f"== {story.title} #{first}-#{last}: no messages in this range", flush=True)
            continue
        started = time.monotonic()
        request = ChronicleRequest.chapter(source, cast, ledger.live())
        done = await chronicle(engine, request, max_output=max_output)
        seconds = time.monotonic() - started
        reply = done.reply
        added: list[str] = []
        ended: list[str] = []
        if reply.ok and (kept := reply.kept) is not None:
            added, ended = ledger.apply(kept, number)
        row = {
            "story": story.title,
            "range": [first, last],
            "calls": done.calls,
            "seconds": round(seconds, 1),
            "problem": done.problem,
            "time": reply.story_time or "",
            "text": reply.text if reply.ok else "",
            "raw": "" if reply.ok else reply.text,
            "ledger_added": added,
            "ledger_ended": ended,
            "misses": list(reply.misses),
        }
        rows.append(row)
        _print(row)
    print(f"== {story.title}: live ledger at the end", flush=True)
    for entry in ledger.live():
        print(f"   {entry_line(entry)}")
    return rows


def _print(row: dict[str, Any]) -> None:
    first, last = row["range"]
    print(
        f"== {row['story']} #{first}-#{last}: {row['calls']} call(s), {row['seconds']} s"
        + (f", FAILED: {row['problem']}" if row["problem"] else ""),
        flush=True,
    )
    if row["time"]:
        print(f"   time: {row['time']}")
    for line in (row["text"] or f"(raw) {row['raw'][:400]}").splitlines():
        print(f"   {line}")
    for line in row["ledger_added"]:
        print(f"   ledger + {line}")
    for line in row["ledger_ended"]:
        print(f"   ledger - {line}")
    print(f"   readback misses ({len(row['misses'])}): {', '.join(row['misses'])}", flush=True)


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    settings = load_settings(n_ctx=args.n_ctx, threads=args.threads)
    persona = settings.persona.name
    if args.stories:
        plan = [(load_file(path, persona), list(args.range)) for path in args.stories]
    else:
        plan = [(load_file(path, persona), list(ranges)) for path, ranges in DEFAULT_STORIES]
    engine = await asyncio.to_thread(open_engine, settings)
    try:
        rows = []
        for story, ranges in plan:
            if not ranges:  # a story given without --range is folded whole, in one chapter
                ranges = [(story.messages[0].id, story.messages[-1].id)]
            rows.extend(await probe_story(engine, story, ranges, args.max_output))
        return rows
    finally:
        engine.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stories", nargs="*", type=Path, help="dataset files (default: two)")
    parser.add_argument(
        "--range", type=_range, action="append", default=[], help="FIRST-LAST, repeatable"
    )
    parser.add_argument("--n-ctx", type=int, default=6144)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--max-output", type=int, default=256, help="the chapter's output cap (summary_max_tokens)"
    )
    parser.add_argument("--json", type=Path, dest="json_out", help="write the chapters here")
    args = parser.parse_args()
    try:
        rows = asyncio.run(run(args))
    except DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    failed = sum(1 for r in rows if r["problem"])
    misses = sum(len(r["misses"]) for r in rows)
    print(f"{len(rows)} chapters, {failed} failed, {misses} readback misses", file=sys.stderr)
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, ensure_ascii=False, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
