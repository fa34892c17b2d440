"""Benchmark: prompt reading speed by the tokens evaluated per owner-thread step (issue 30).

Between two steps of a model call the owner thread sees Esc and lets a more urgent call (a
reply) go first, so the size of a step is how long Esc, or a reply arriving while a background
fold reads its prompt, waits. This reads the same ~1,600-token prompt into a fresh context
with steps of 512 (llama_engine's n_batch), 128 and 64 tokens (engine/kv_slot.py
STEP_TOKENS), on the embedded default, twice over, and gives tokens/s and the time one step
takes at that rate.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from benchmarks.common import BenchResult, Table, default_model_settings, median
from kotonia_tui.chat.bootstrap import open_engine
from kotonia_tui.engine import ChatMessage, GenerationRequest

N_CTX = 2048
STEPS = (512, 128, 64)
ROUNDS = 2
TEXT = " ".join(f"The harbour keeps lantern number {i} lit in every storm." for i in range(120))


async def run() -> BenchResult:
    started = time.perf_counter()
    engine = await asyncio.to_thread(open_engine, default_model_settings(n_ctx=N_CTX))
    rates: dict[int, list[float]] = {step: [] for step in STEPS}
    try:
        for round_ in range(ROUNDS):
            for step in STEPS:
                for slot in engine._slots.values():  # type: ignore[attr-defined]
                    slot.step_tokens = step
                # A system line of its own each time: nothing of the prompt is in the context.
                request = GenerationRequest(
                    messages=(
                        ChatMessage("system", f"Round {round_}, steps of {step}."),
                        ChatMessage("user", TEXT),
                    ),
                    max_tokens=1,
                    prefill_only=True,
                )
                metrics = (await engine.start(request).result()).metrics
                rates[step].append(metrics.evaluated / (metrics.prompt_ms / 1000))
    finally:
        await asyncio.to_thread(engine.close)
    table = Table(
        f"Prompt reading by tokens per step (embedded default, n_ctx {N_CTX:,}, "
        f"{os.cpu_count()} cores, {ROUNDS} rounds)",
        ("tokens per step", "tokens/s (each round)", "median tokens/s", "s per step"),
    )
    figures: dict[str, Any] = {"rates": {str(k): v for k, v in rates.items()}}
    for step in STEPS:
        rate = median(rates[step])
        table.add(step, ", ".join(f"{r:.1f}" for r in rates[step]), rate, step / rate)
    load = [round(x, 2) for x in os.getloadavg()]
    table.notes = [
        "each context's step size is set for the run (the app's: STEP_TOKENS, at most "
        "n_batch); s per step: how long Esc or a waiting reply waits at most",
        f"load average at the end: {load} (other processes share the cores)",
    ]
    figures["load_average"] = load
    return BenchResult("prompt_steps", [table], figures, time.perf_counter() - started)
