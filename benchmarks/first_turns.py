"""Benchmark: the first replies of a session against a warm one, on the embedded default.

Issue 34: on a fresh data dir the first turns generated at under 2 tokens/s and later ones at
9-40. In one run, with the shipped card the issue used (a setup of about 1,100 tokens):

    fresh 1-3    a new conversation in a data dir with no saved state: three turns sent one
                 after the other, as `kotonia chat --say A --say B --say C` does (each turn's
                 settle and state writes are still in the background when the next starts)
    warm         three more turns in the same process after everything settled (the user read
                 the reply): their median is the warm rate
    restored     a new service on the same data dir (a restart): its first turn loads the
                 conversation's saved state

Each row gives time to first token (from sending to the first text), prompt ms, tokens/s of
the generation, and the CPU seconds the process's threads used during the turn, by kind:
`model` (the owner thread), `native` (threads Python did not start: llama.cpp's workers),
`kv write` (the saved-state writer), `other` (the event loop and the rest), and the share of
the usable cores the process had (its CPU seconds over the turn's wall time times the cores):
other programs on the machine take the rest. CPU figures come from /proc (Linux) and are left
empty elsewhere.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import BenchResult, Table, default_model_settings, median, ratio
from kotonia_tui.chat.bootstrap import open_service, state_cache_config
from kotonia_tui.chat.events import ReplyDelta, TurnDone
from kotonia_tui.chat.service import ChatService
from kotonia_tui.config import Settings

CARD = "rowan-ashby"  # a shipped card with a setup of about 1,100 tokens (the issue's)
N_CTX = 4096
REPLY_TOKENS = 48
LINES = (
    "Hello, who are you? Tell me about this place.",
    "What do you do here every day?",
    "Show me around the shop, please.",
    "Which of these clocks is the oldest?",
    "Can you teach me how to wind it?",
    "I thank you and ask if I may come back tomorrow.",
    "I wave goodbye from the door.",
)
GROUPS = ("model", "native", "kv write", "other")


@dataclass(frozen=True)
class TurnFigures:
    arm: str
    ttft_ms: float
    prompt_ms: float
    evaluated: int
    restored: int
    generated: int
    tokens_per_s: float
    cpu: dict[str, float] | None  # CPU seconds by thread kind during the turn
    cpu_share: float | None  # of the usable cores, during the turn

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _thread_cpu() -> dict[int, float] | None:
    """CPU seconds (user + system) of each thread of this process, by native id."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    found: dict[int, float] = {}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue  # the thread ended
        fields = stat.rsplit(")", 1)[1].split()
        found[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return found


def _kind(name: str | None) -> str:
    if name is None:
        return "native"
    if name == "kotonia-model":
        return "model"
    if name.startswith("kotonia-kv-write"):
        return "kv write"
    return "other"


def _cpu_by_kind(before: dict[int, float] | None, after: dict[int, float] | None) -> Any:
    if before is None or after is None:
        return None
    names = {t.native_id: t.name for t in threading.enumerate()}
    totals = dict.fromkeys(GROUPS, 0.0)
    for tid, used in after.items():
        totals[_kind(names.get(tid))] += used - before.get(tid, 0.0)
    return {k: round(v, 2) for k, v in totals.items()}


async def _turn(service: ChatService, conv_id: int, text: str, arm: str) -> TurnFigures:
    before = _thread_cpu()
    sent = time.perf_counter()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    first: float | None = None
    turn = await service.send(conv_id, text)
    done: TurnDone | None = None
    async for event in turn:
        if isinstance(event, ReplyDelta) and first is None and event.text.strip():
            first = time.perf_counter()
        if isinstance(event, TurnDone):
            done = event
    cpu = _cpu_by_kind(before, _thread_cpu())
    wall = time.perf_counter() - sent
    share = round(sum(cpu.values()) / (wall * (cores or 1)), 2) if cpu else None
    if done is None or done.error is not None or done.metrics is None:
        raise RuntimeError(f"the turn failed: {done.error if done else 'no end'}")
    m = done.metrics
    return TurnFigures(
        arm=arm,
        ttft_ms=((first or time.perf_counter()) - sent) * 1000,
        prompt_ms=m.prompt_ms,
        evaluated=m.evaluated,
        restored=m.restored,
        generated=m.generated,
        tokens_per_s=m.tokens_per_s,
        cpu=cpu,
        cpu_share=share,
    )


def _settings() -> Settings:
    return default_model_settings(n_ctx=N_CTX, reply_max_tokens=REPLY_TOKENS)


async def _session(settings: Settings) -> ChatService:
    service = await asyncio.to_thread(open_service, settings)
    await service.start()
    return service


async def run() -> BenchResult:
    started = time.perf_counter()
    settings = _settings()
    # A data dir with no saved state (another benchmark may have left some).
    shutil.rmtree(state_cache_config(settings).folder, ignore_errors=True)
    rows: list[TurnFigures] = []
    service = await _session(settings)
    try:
        card = service.library.find(CARD)
        conv = service.new_conversation(card)
        for index in range(3):  # sent one after the other, as `--say` does
            rows.append(await _turn(service, conv.id, LINES[index], f"fresh {index + 1}"))
        await service.states_settled()
        for index in (3, 4, 5):
            rows.append(await _turn(service, conv.id, LINES[index], f"warm {index - 2}"))
            await service.states_settled()  # the user reads the reply
    finally:
        await service.close()
    service = await _session(settings)
    try:
        rows.append(await _turn(service, conv.id, LINES[6], "restored (new service)"))
    finally:
        await service.close()
    return _result(rows, time.perf_counter() - started)


def _result(rows: Sequence[TurnFigures], seconds: float) -> BenchResult:
    table = Table(
        f"First turns of a session against warm ones (embedded default, n_ctx {N_CTX:,}, "
        f"{os.cpu_count()} cores, card {CARD})",
        (
            "turn",
            "ttft ms",
            "prompt ms",
            "evaluated",
            "restored",
            "generated",
            "tokens/s",
            "x warm",
            *(f"cpu s {g}" for g in GROUPS),
            "cpu share",
        ),
    )
    warm_rate = median(r.tokens_per_s for r in rows if r.arm.startswith("warm"))
    for r in rows:
        cpu = r.cpu or {}
        table.add(
            r.arm,
            round(r.ttft_ms),
            round(r.prompt_ms),
            r.evaluated,
            r.restored,
            r.generated,
            round(r.tokens_per_s, 2),
            ratio(r.tokens_per_s, warm_rate),
            *(cpu.get(g) for g in GROUPS),
            r.cpu_share,
        )
    load = [round(x, 2) for x in os.getloadavg()]
    first = [r for r in rows if not r.arm.startswith("warm")]
    worst = min((r.tokens_per_s for r in first), default=0.0)
    table.notes = [
        f"warm rate (median of the warm turns): {warm_rate:.2f} tokens/s; the slowest first or "
        f"restored turn: {ratio(worst, warm_rate)} x warm",
        "fresh turns are sent back to back (as `kotonia chat --say`); warm turns after "
        "everything settled; restored is the first turn of a new service on the same data dir",
        f"load average at the end: {load} (other processes share the cores)",
        "OpenMP waits (engine/threads.py): "
        + ", ".join(f"{n}={os.environ.get(n, '-')}" for n in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")),
    ]
    figures: dict[str, Any] = {
        "rows": [r.as_json() for r in rows],
        "warm_tokens_per_s": warm_rate,
        "slowest_first_over_warm": ratio(worst, warm_rate),
        "load_average": load,
    }
    return BenchResult("first_turns", [table], figures, seconds)
