"""What the chapters' in-story dates cost in the memory block, in the embedded default's tokens.

A memory block as a small model leaves it at n_ctx 2048 (issue 28: most chapters quoted, the
older ones quoted into the synopsis) is built by code alone from the first 200 messages of each
shipped evaluation conversation: chapters of `CHAPTER_MESSAGES` messages, each quoted at the
size a fold quotes a range (chat/fold/chapters.py `extracted_piece`), dated from the scenes'
openings as a fold dates them (story_dates.chapter_time); the oldest chapters quoted into a
synopsis at the synopsis target (chat/fold/synopsis.py), the newest `major_gc` tokens of them
left as chapters. Three arms, side by side:

* no dates: no chapter has a time (the floor);
* before: chapter headings with their time, each one; the quoted synopsis without any (the
  block before the dates survived a major fold);
* now: the quoted synopsis's lines and the headings with their time, once per run of the same.

The quote is fitted to its target either way, so dates in the synopsis's labels take the room
of quoted sentences: the table says both the tokens and how many lines and dates the synopsis
carries. Tokens are counted with the model's vocabulary only (engine/vocab.py).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import BenchResult, Stopwatch, Table
from kotonia_tui import story_dates
from kotonia_tui.config import Settings, app_dirs
from kotonia_tui.domain import QUOTED_SYNOPSIS_LEAD, Chapter, Message, Role
from kotonia_tui.engine.default_model import default_model_path
from kotonia_tui.engine.vocab import VocabCounter
from kotonia_tui.memory.assembly import MemoryBlock
from kotonia_tui.memory.budgets import Budgets
from kotonia_tui.memory.extract import (
    label_time,
    message_passages,
    quote_passages,
    synopsis_passages,
)
from kotonia_tui.memory.policy import EXPECTED_CHAPTER_RATIO

DATASETS = ("lighthouse", "chitchat")
MESSAGES = 200  # as the measurement: the first 200 messages
CHAPTER_MESSAGES = 10  # 19-20 chapters of 200 messages, as the run made
N_CTX = 2048
EXTRACT_MIN_TOKENS = 32  # chat/fold/chapters.py
_DATED_LABEL = re.compile(r"#\d+-#\d+, ")  # a quoted line under its range and time
_DATED_CHAPTER = re.compile(r"#\d+-#\d+, .+:$")  # a chapter's label in the block, with its time


@dataclass(frozen=True)
class Arm:
    name: str
    synopsis_dates: bool
    heading_dates: bool


ARMS = (Arm("no dates", False, False), Arm("before", False, True), Arm("now", True, True))


def _messages(name: str) -> list[Message]:
    path = Path(__file__).resolve().parent.parent / "assets" / "eval" / f"{name}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    return [
        Message(id=m["id"], role=Role(m["role"]), speaker=m["speaker"], text=m["text"])
        for m in data["messages"][:MESSAGES]
    ]


async def _chapters(messages: Sequence[Message], counter: VocabCounter) -> list[Chapter]:
    async def count(texts: list[str]) -> list[int]:
        return [counter.count_tokens(t) for t in texts]

    dated = story_dates.scene_dates((m.id or 0, m.text) for m in messages)
    chapters: list[Chapter] = []
    for start in range(0, len(messages), CHAPTER_MESSAGES):
        piece = messages[start : start + CHAPTER_MESSAGES]
        source = sum(counter.count_tokens(f"{m.speaker}: {m.text}\n") for m in piece)
        target = max(EXTRACT_MIN_TOKENS, int(source * EXPECTED_CHAPTER_RATIO))
        text, tokens = await quote_passages(message_passages(piece), target, count)
        dates = [dated[m.id] for m in piece if m.id in dated]
        chapters.append(
            Chapter(
                conversation_id=1,
                first_message_id=piece[0].id or 0,
                last_message_id=piece[-1].id or 0,
                text=text,
                tokens=tokens,
                story_time=story_dates.chapter_time(None, dates),
            )
        )
    return chapters


async def _block(
    chapters: Sequence[Chapter], arm: Arm, budgets: Budgets, counter: VocabCounter
) -> dict[str, Any]:
    async def count(texts: list[str]) -> list[int]:
        return [counter.count_tokens(t) for t in texts]

    def timed(chapter: Chapter, keep: bool) -> Chapter:
        return chapter if keep else chapter.model_copy(update={"story_time": None})

    # The newest chapters up to the major fold's size stay chapters; the rest are folded.
    live: list[Chapter] = []
    for chapter in reversed(chapters):
        if live and sum(c.tokens for c in live) + chapter.tokens > budgets.major_gc:
            break
        live.insert(0, chapter)
    older = [timed(c, arm.synopsis_dates) for c in chapters[: len(chapters) - len(live)]]
    lead = counter.count_tokens(QUOTED_SYNOPSIS_LEAD)
    quoted, _tokens = await quote_passages(
        synopsis_passages(None, older), max(1, budgets.synopsis_target - lead), count
    )
    synopsis = f"{QUOTED_SYNOPSIS_LEAD}\n{quoted}"
    shown = tuple(timed(c, arm.heading_dates) for c in live)
    text = MemoryBlock(synopsis, shown).render()
    lines = quoted.splitlines()
    times = {t for c in older if (t := label_time(c.story_time))}
    # The same block without its dates: what the dates themselves cost in it.
    undated = text
    for time in sorted(times, key=len, reverse=True):
        undated = undated.replace(f", {time}: ", ": ")
    for chapter in shown:
        span = f"#{chapter.first_message_id}-#{chapter.last_message_id}"
        undated = undated.replace(f"{span}, {label_time(chapter.story_time)}:\n", f"{span}:\n")
    return {
        "block_tokens": counter.count_tokens(text),
        "date_tokens": counter.count_tokens(text) - counter.count_tokens(undated),
        "synopsis_tokens": counter.count_tokens(synopsis),
        "synopsis_lines": len(lines),
        "synopsis_dated_lines": sum(1 for line in lines if _DATED_LABEL.match(line)),
        "headings_dated": sum(1 for line in text.splitlines() if _DATED_CHAPTER.match(line)),
        "chapters_live": len(live),
        "chapters_folded": len(older),
        "text": text,
    }


async def run() -> BenchResult:
    timer = Stopwatch()
    settings = Settings()
    budgets = Budgets.for_window(N_CTX, settings.active_profile().reply_max_tokens, settings)
    counter = VocabCounter(default_model_path(app_dirs().cache))
    table = Table(
        f"In-story dates in the memory block (embedded default's tokens, n_ctx {N_CTX})",
        (
            "conversation",
            "arm",
            "block tokens",
            "of them dates",
            "synopsis tokens",
            "synopsis lines",
            "dated lines",
            "dated headings",
            "chapters",
        ),
    )
    figures: dict[str, Any] = {}
    try:
        for name in DATASETS:
            chapters = await _chapters(_messages(name), counter)
            for arm in ARMS:
                got = await _block(chapters, arm, budgets, counter)
                figures[f"{name}/{arm.name}"] = got
                table.add(
                    name,
                    arm.name,
                    got["block_tokens"],
                    got["date_tokens"],
                    got["synopsis_tokens"],
                    got["synopsis_lines"],
                    got["synopsis_dated_lines"],
                    got["headings_dated"],
                    f"{got['chapters_live']} live, {got['chapters_folded']} in synopsis",
                )
    finally:
        counter.close()
    table.notes.append(
        f"{MESSAGES} messages, chapters of {CHAPTER_MESSAGES} quoted at "
        f"{EXPECTED_CHAPTER_RATIO:.0%} of their source; synopsis target "
        f"{budgets.synopsis_target} tokens, major fold at {budgets.major_gc}"
    )
    return BenchResult("memory_dates", [table], figures, timer.ms / 1000)


if __name__ == "__main__":
    result = asyncio.run(run())
    for t in result.tables:
        print(t.render())
