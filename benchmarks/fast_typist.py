"""Benchmark: a fast typist, 40 turns sent back to back, with memory and without (issue 30).

A player who sends the next line as soon as the reply ends gives the chronicler no time
between turns. A turn at the ceiling used to wait for the chapter that keeps its messages in
memory (40 turns at n_ctx 2048 did not finish in 250-280 s, stderr showing "waiting for fold"
turn after turn); now it quotes them at once and the chronicler's chapters replace the quotes
in the background (chat/fold/quote_first.py).

Two arms in one run, on the embedded default at n_ctx 2048, each in a new conversation with
the benchmark card, the same 40 lines, no delay between turns, short replies:

    memory       the default settings: folds queued at the trigger, quote first at the ceiling
                 (quoted when a reply ends, for the next turn, and that prompt prewarmed)
    typing       the same, with TYPING_S between a reply's end and the next line (a fast
                 typist still takes that long to write one): the time the prewarm has
    truncation   no memory: the fold worker paused and no waiting, so the history is cut at
                 the ceiling (a sliding window); the baseline a turn cannot beat on time

Per turn: time to first token (from sending to the first text), `fold_wait_ms` (how long the
turn waited for a fold before its prompt was built), whether it cut messages with no memory
for them (`forced_cut`) and whether it applied landed memory. The table gives p50, p95 and max
of each arm side by side, with the forced cuts and the chapters that landed.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.common import (
    BenchResult,
    Table,
    default_model_settings,
    median,
    user_line,
    write_card,
)
from kotonia_tui.chat.bootstrap import open_service
from kotonia_tui.chat.events import ReplyDelta, TurnDone
from kotonia_tui.chat.service import ChatService
from kotonia_tui.config import Settings

N_CTX = 2048
TURNS = 40
REPLY_TOKENS = 24  # short replies: the benchmark is about the waits, not the writing
TYPING_S = 3.0  # the typing arm's pause between a reply's end and the next line
ARMS = ("memory", "typing", "truncation")


@dataclass(frozen=True)
class TurnFigures:
    arm: str
    index: int
    ttft_ms: float
    fold_wait_ms: float
    forced_cut: bool
    fold_applied: bool
    evaluated: int

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile (p95 of 40 values is the 38th smallest)."""
    items = sorted(values)
    if not items:
        return 0.0
    rank = max(1, -(-len(items) * share // 1))
    return float(items[int(rank) - 1])


async def _turn(service: ChatService, conv_id: int, text: str, arm: str, index: int) -> TurnFigures:
    sent = time.perf_counter()
    first: float | None = None
    turn = await service.send(conv_id, text)
    done: TurnDone | None = None
    async for event in turn:
        if isinstance(event, ReplyDelta) and first is None and event.text.strip():
            first = time.perf_counter()
        if isinstance(event, TurnDone):
            done = event
    if done is None or done.error is not None or done.metrics is None:
        raise RuntimeError(f"turn {index} failed: {done.error if done else 'no end'}")
    plan = turn.prepared.plan
    return TurnFigures(
        arm=arm,
        index=index,
        ttft_ms=((first or time.perf_counter()) - sent) * 1000,
        fold_wait_ms=turn.prepared.fold_wait_ms,
        forced_cut=plan.forced_cut_through is not None,
        fold_applied=plan.apply_landed,
        evaluated=done.metrics.evaluated,
    )


def _settings(arm: str) -> Settings:
    # The app's fold delay (the benchmarks' default is none): a fold is queued at the trigger
    # and runs 30 s later, as for a player.
    values: dict[str, Any] = {"fold_delay_s": 30.0}
    if arm == "truncation":
        values |= {"fold_quote_first": False, "fold_wait_s": 0.0}
    return default_model_settings(n_ctx=N_CTX, reply_max_tokens=REPLY_TOKENS, **values)


async def _arm(arm: str) -> tuple[list[TurnFigures], dict[str, int]]:
    key = write_card()  # before the service reads the card folder
    service = await asyncio.to_thread(open_service, _settings(arm))
    await service.start()
    try:
        if arm == "truncation":
            service.worker.pause()
        conv = service.new_conversation(service.library.get(key))
        rows = []
        for index in range(TURNS):
            rows.append(await _turn(service, conv.id, user_line(index), arm, index))
            if arm == "typing":
                await asyncio.sleep(TYPING_S)
        chapters = service.store.chapters(conv.id, include_in_synopsis=True)
        counts = {
            "chapters": len(chapters),
            "quoted": sum(1 for c in chapters if c.quoted),
            "forced_cuts": service.store.memory_state(conv.id).forced_cuts,
        }
    finally:
        await service.close()
    return rows, counts


async def run() -> BenchResult:
    started = time.perf_counter()
    rows: list[TurnFigures] = []
    counts: dict[str, dict[str, int]] = {}
    for arm in ARMS:
        arm_rows, counts[arm] = await _arm(arm)
        rows += arm_rows
    return _result(rows, counts, time.perf_counter() - started)


def _result(
    rows: Sequence[TurnFigures], counts: dict[str, dict[str, int]], seconds: float
) -> BenchResult:
    table = Table(
        f"A fast typist: {TURNS} turns back to back (embedded default, n_ctx {N_CTX:,}, "
        f"replies of at most {REPLY_TOKENS} tokens, {os.cpu_count()} cores)",
        (
            "arm",
            "ttft p50 ms",
            "ttft p95 ms",
            "ttft max ms",
            "wait p50 ms",
            "wait p95 ms",
            "wait max ms",
            "evaluated p50",
            "evaluated p95",
            "turns waited",
            "forced cuts",
            "folds applied",
            "chapters (quoted)",
        ),
    )
    figures: dict[str, Any] = {"rows": [r.as_json() for r in rows], "arms": {}}
    for arm in ARMS:
        mine = [r for r in rows if r.arm == arm]
        ttft = [r.ttft_ms for r in mine]
        wait = [r.fold_wait_ms for r in mine]
        summary = {
            "ttft_p50_ms": median(ttft),
            "ttft_p95_ms": percentile(ttft, 0.95),
            "ttft_max_ms": max(ttft, default=0.0),
            "fold_wait_p50_ms": median(wait),
            "fold_wait_p95_ms": percentile(wait, 0.95),
            "fold_wait_max_ms": max(wait, default=0.0),
            "evaluated_p50": median(r.evaluated for r in mine),
            "evaluated_p95": percentile([r.evaluated for r in mine], 0.95),
            "turns_waited": sum(1 for w in wait if w >= 1.0),
            "forced_cuts": sum(1 for r in mine if r.forced_cut),
            "folds_applied": sum(1 for r in mine if r.fold_applied),
            **counts[arm],
        }
        figures["arms"][arm] = summary
        table.add(
            arm,
            round(summary["ttft_p50_ms"]),
            round(summary["ttft_p95_ms"]),
            round(summary["ttft_max_ms"]),
            round(summary["fold_wait_p50_ms"]),
            round(summary["fold_wait_p95_ms"]),
            round(summary["fold_wait_max_ms"]),
            round(summary["evaluated_p50"]),
            round(summary["evaluated_p95"]),
            summary["turns_waited"],
            summary["forced_cuts"],
            summary["folds_applied"],
            f"{counts[arm]['chapters']} ({counts[arm]['quoted']})",
        )
    load = [round(x, 2) for x in os.getloadavg()]
    table.notes = [
        "memory: default settings (quote first at the ceiling), lines sent back to back; "
        f"typing: the same with {TYPING_S:g} s between a reply and the next line; truncation: "
        "the fold worker paused and no waiting, so the ceiling cuts (a sliding window, no "
        "memory)",
        "evaluated: prompt positions each turn read (the rest came from the KV cache)",
        "ttft: from sending to the first text; wait: fold_wait_ms, the time the turn waited "
        "for a fold before its prompt was built; turns waited: those that waited 1 ms or more",
        "chapters (quoted): chapters stored by the end of the arm, and how many of them are "
        "still quotes the chronicler has not replaced yet",
        f"load average at the end: {load} (other processes share the cores)",
    ]
    figures["load_average"] = load
    return BenchResult("fast_typist", [table], figures, seconds)
