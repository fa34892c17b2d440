"""Benchmark: the first turn of a long imported chat, beside an ordinary turn (issue 30).

A 300-message SillyTavern chat is imported and continued at n_ctx 2048 on the embedded
default. What does not fit the window is quoted at once by code (chat/fold/quote_first.py) and
reached by recall; the chronicler's chapters replace the quotes in the background. The issue's
bar: the first turn answers "within the time of an ordinary turn plus reading the recalled
text".

Three turns, each timed from sending to the first text of the reply:

    opened      the chat imported and opened as the app opens a conversation: the backlog
                is quoted and the first prompt prewarmed while the player writes (the time
                that takes is given), then the player's line is sent
    ordinary    the next line in the opened chat, sent TYPING_S after that reply ends, the
                chronicler working in the background meanwhile
    at once     another copy imported and answered at once (`kotonia chat --conversation ID
                --say ...` right after `kotonia import`): the quotes are made in the turn and
                the prompt is read cold after the character's setup

Per turn: time to first token, prompt positions and those evaluated, the prompt's time, the
recalled excerpts (messages, tokens) and what reading them costs at that turn's rate.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import (
    USER_LINES,
    BenchResult,
    Table,
    default_model_settings,
    write_card,
)
from kotonia_tui.chat.bootstrap import open_service
from kotonia_tui.chat.events import ReplyDelta, TurnDone
from kotonia_tui.chat.service import ChatService
from kotonia_tui.chat.turn import Turn

N_CTX = 2048
MESSAGES = 300
REPLY_TOKENS = 40
TYPING_S = 3.0

# The character's side of the imported chat, cycled with the user's lines: a story that moves,
# with names and numbers a later question can ask about.
REPLIES = (
    'Wren sets a chipped blue cup in front of you. "The kettle has seen {n} winters here."',
    'She points at the log book. "Ship {n} passed on a calm night; the Grey Heron never did."',
    'Wren trims the wick. "The lamp burns {n} litres of oil on a night like this."',
    '"My father kept this light before me," Wren says. "He counted {n} storms."',
    'Wren laughs softly. "The cat is called Pepper. She has caught {n} mice this year."',
    'She unfolds a chart. "The reef lies {n} fathoms down, east of the harbour."',
)


def chat_lines(messages: int) -> list[dict[str, Any]]:
    """A SillyTavern chat (JSONL rows) of `messages` lines between Ann and Wren (the benchmark
    card), ending with Wren's line."""
    rows: list[dict[str, Any]] = [
        {"user_name": "Ann", "character_name": "Wren", "create_date": "2026-01-01"}
    ]
    for index in range(messages):
        user = index % 2 == (messages % 2)
        if user:
            text = f"{USER_LINES[(index // 2) % len(USER_LINES)]} ({index})"
        else:
            text = REPLIES[(index // 2) % len(REPLIES)].format(n=index + 3)
        rows.append({"name": "Ann" if user else "Wren", "is_user": user, "mes": text})
    return rows


@dataclass(frozen=True)
class TurnFigures:
    name: str
    ttft_ms: float
    positions: int
    evaluated: int
    prompt_ms: float
    recalled_messages: int
    recalled_tokens: int
    fold_applied: bool
    forced_cut: bool

    @property
    def ms_per_position(self) -> float:
        return self.prompt_ms / self.evaluated if self.evaluated else 0.0

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


async def _timed(name: str, start: Awaitable[Turn]) -> TurnFigures:
    sent = time.perf_counter()
    turn: Turn = await start
    first: float | None = None
    done: TurnDone | None = None
    async for event in turn:
        if isinstance(event, ReplyDelta) and first is None and event.text.strip():
            first = time.perf_counter()
        if isinstance(event, TurnDone):
            done = event
    if done is None or done.error is not None or done.metrics is None:
        raise RuntimeError(f"{name}: {done.error if done else 'no end'}")
    metrics, prepared = done.metrics, turn.prepared
    return TurnFigures(
        name=name,
        ttft_ms=((first or time.perf_counter()) - sent) * 1000,
        positions=metrics.prompt_positions,
        evaluated=metrics.evaluated,
        prompt_ms=metrics.prompt_ms,
        recalled_messages=len(prepared.recall.message_ids),
        recalled_tokens=prepared.recall.tokens,
        fold_applied=prepared.plan.apply_landed,
        forced_cut=prepared.plan.forced_cut_through is not None,
    )


def _import(service: ChatService, folder: Path, name: str) -> int:
    path = folder / f"{name}.jsonl"
    path.write_text(
        "\n".join(json.dumps(row) for row in chat_lines(MESSAGES)) + "\n", encoding="utf-8"
    )
    return service.manager.import_file(path).conversation.id


async def run() -> BenchResult:
    started = time.perf_counter()
    write_card()
    settings = default_model_settings(n_ctx=N_CTX, reply_max_tokens=REPLY_TOKENS, fold_delay_s=30.0)
    service = await asyncio.to_thread(open_service, settings)
    await service.start()
    rows: list[TurnFigures] = []
    extra: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory() as folder:
            at_once = _import(service, Path(folder), "at-once")
            opened = _import(service, Path(folder), "opened")
        # The opened chat first: the character's setup state it reads is then in memory for
        # the chat answered at once, as a saved one is for `kotonia chat` after the first run.
        writing = time.perf_counter()
        await service.open_conversation(opened)
        await service.looked_ahead()
        extra["opened_prewarm_s"] = round(time.perf_counter() - writing, 2)
        line = "Who kept this light before you, and how many storms did he count?"
        rows.append(await _timed("opened", service.send(opened, line)))
        await service.looked_ahead()
        await asyncio.sleep(TYPING_S)
        rows.append(await _timed("ordinary", service.send(opened, "I warm my hands by the lamp.")))
        rows.append(await _timed("at once", service.send(at_once, line)))
        chapters = service.store.chapters(opened, include_in_synopsis=True)
        extra["chapters"] = len(chapters)
        extra["quoted"] = sum(1 for c in chapters if c.quoted)
    finally:
        await service.close()
    return _result(rows, extra, time.perf_counter() - started)


def _result(rows: list[TurnFigures], extra: dict[str, Any], seconds: float) -> BenchResult:
    table = Table(
        f"A {MESSAGES}-message import continued (embedded default, n_ctx {N_CTX:,}, "
        f"{os.cpu_count()} cores)",
        (
            "turn",
            "ttft ms",
            "positions",
            "evaluated",
            "prompt ms",
            "recalled (msgs/tokens)",
            "recall read ms",
            "fold applied",
            "forced cut",
        ),
    )
    ordinary = next((r for r in rows if r.name == "ordinary"), None)
    rate = ordinary.ms_per_position if ordinary is not None and ordinary.evaluated else 0.0
    for row in rows:
        # Reading the recalled text at the turn's own rate, else at the ordinary turn's.
        per = row.ms_per_position or rate
        table.add(
            row.name,
            round(row.ttft_ms),
            row.positions,
            row.evaluated,
            round(row.prompt_ms),
            f"{row.recalled_messages}/{row.recalled_tokens}",
            round(row.recalled_tokens * per),
            row.fold_applied,
            row.forced_cut,
        )
    load = [round(x, 2) for x in os.getloadavg()]
    table.notes = [
        "at once: answered right after the import; opened: opened as the app does, the "
        f"player's line sent once the look-ahead's prewarm ended ({extra.get('opened_prewarm_s')}"
        f" s after opening); ordinary: the next line, {TYPING_S:g} s after that reply",
        "recall read ms: the recalled tokens at the turn's own prompt rate (ms per position)",
        f"chapters of the opened chat at the end: {extra.get('chapters')} "
        f"({extra.get('quoted')} still quoted)",
        f"load average at the end: {load} (other processes share the cores)",
    ]
    figures = {"rows": [r.as_json() for r in rows], **extra, "load_average": load}
    return BenchResult("long_import", [table], figures, seconds)
