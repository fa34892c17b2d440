"""Benchmark 4: tokens/s of a Kotonia turn against a bare llama-cpp-python loop, same model.

On the embedded default (Gemma 3 270M), one prompt (a short story transcript) is generated
greedily three ways:

* Kotonia: `LlamaEngine.generate` (owner thread, KV slot, sampler chain with a neutral repeat
  penalty, UTF-8 and stop-string streaming, asyncio delivery). Its figure is `tokens_per_s`
  (generated / sampling time, prompt excluded).
* bare loop: a fresh `llama_cpp.Llama` on the same file, threads and batch size; the same prompt
  tokens evaluated with `Llama.eval`, then exactly as many tokens as Kotonia generated, each
  picked by argmax over the logits and fed back with `Llama.eval([token])`.
* `Llama.create_completion(prompt, temperature=0)`: the stock high-level path (it may stop
  earlier on end-of-text; its tokens/s is over what it generated).

Each arm runs `REPEATS` times; the table shows medians and the ratio to the bare loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import llama_cpp
import numpy as np

from benchmarks.common import BenchResult, Table, default_model_settings, median, ratio
from kotonia_tui.chat.bootstrap import open_engine
from kotonia_tui.domain import ChatMessage
from kotonia_tui.engine import GenerationRequest, LlamaEngine

REPEATS = 5
ARMS = ("Kotonia turn", "bare eval loop", "Llama.create_completion")
MAX_TOKENS = 64
PROMPT = (
    ChatMessage(
        role="system",
        content="Wren keeps the old lighthouse on a stormy northern coast. She is calm and kind.",
    ),
    ChatMessage(role="user", name="Ann", content="Tell me about the ship that sank last autumn."),
)


def _llama(path: str, threads: int) -> llama_cpp.Llama:
    return llama_cpp.Llama(
        model_path=path,
        n_ctx=2048,
        n_threads=threads,
        n_threads_batch=threads,
        n_batch=512,
        verbose=False,
    )


def _bare(llm: llama_cpp.Llama, tokens: list[int], count: int) -> dict[str, Any]:
    n_vocab = llm.n_vocab()
    llm.reset()
    llm.eval(tokens)
    started = time.perf_counter()
    for _ in range(count):
        logits = np.ctypeslib.as_array(
            llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(n_vocab,)
        )
        llm.eval([int(np.argmax(logits))])
    ms = (time.perf_counter() - started) * 1000
    return {"generated": count, "gen_ms": ms, "tps": count / (ms / 1000)}


def _stock(llm: llama_cpp.Llama, tokens: list[int]) -> dict[str, Any]:
    llm.reset()
    started = time.perf_counter()
    first: float | None = None
    count = 0
    for _chunk in llm.create_completion(
        tokens, max_tokens=MAX_TOKENS, temperature=0.0, repeat_penalty=1.0, stream=True
    ):
        count += 1
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    # From the first streamed token, so the prompt evaluation is not counted.
    ms = (end - (first or started)) * 1000
    tps = (count - 1) / (ms / 1000) if count > 1 and ms > 0 else 0.0
    return {"generated": count, "gen_ms": ms, "tps": tps}


async def _measure() -> tuple[dict[str, list[dict[str, Any]]], int, int]:
    settings = default_model_settings(repeat_penalty=1.0, reply_max_tokens=MAX_TOKENS)
    engine = await asyncio.to_thread(open_engine, settings)
    assert isinstance(engine, LlamaEngine)  # measured against a bare llama-cpp-python loop
    request = GenerationRequest(
        messages=PROMPT, max_tokens=MAX_TOKENS, reply_name="Wren", user_name="Ann"
    )
    runs: dict[str, list[dict[str, Any]]] = {ARMS[0]: [], ARMS[1]: [], ARMS[2]: []}
    llm = None
    try:
        tokens = engine._tokenize_prompt_text(engine.render(request).text)
        llm = _llama(str(engine.info.model_path), engine.info.threads)
        # The arms alternate, so a noisy moment on the machine hits them alike.
        for _ in range(REPEATS):
            # The same request each time: the KV keeps the prompt and greedy sampling starts
            # from the same state, so every run generates the same tokens.
            m = (await engine.generate(request)).metrics
            runs[ARMS[0]].append(
                {"generated": m.generated, "gen_ms": m.gen_ms, "tps": m.tokens_per_s}
            )
            runs[ARMS[1]].append(await asyncio.to_thread(_bare, llm, tokens, m.generated))
            runs[ARMS[2]].append(await asyncio.to_thread(_stock, llm, tokens))
        threads = engine.info.threads
    finally:
        if llm is not None:
            llm.close()
        engine.close()
    return runs, len(tokens), threads


async def run() -> BenchResult:
    started = time.perf_counter()
    runs, prompt_tokens, threads = await _measure()
    base = median(r["tps"] for r in runs[ARMS[1]])
    table = Table(
        f"4. Engine overhead: greedy generation on the embedded default ({prompt_tokens}-token "
        "prompt)",
        ("arm", "tokens", "median ms", "median tokens/s", "ratio to bare loop"),
    )
    figures: dict[str, Any] = {"prompt_tokens": prompt_tokens, "threads": threads}
    for name in ARMS:
        arm = runs[name]
        tps = median(r["tps"] for r in arm)
        table.add(
            name,
            int(median(r["generated"] for r in arm)),
            median(r["gen_ms"] for r in arm),
            tps,
            ratio(tps, base),
        )
        figures[name] = {"runs": arm, "median_tps": round(tps, 2), "ratio": ratio(tps, base)}
    table.notes = [
        f"medians of {REPEATS} rounds, the arms alternating; prompt evaluation excluded from "
        f"every arm; same threads ({threads}) and batch size; repeat penalty 1.0 everywhere",
        "bare loop: Llama.eval + argmax over the logits, as many tokens as Kotonia generated; "
        "create_completion stops only at end-of-text or the cap",
    ]
    figures["kotonia_to_bare"] = ratio(median(r["tps"] for r in runs[ARMS[0]]), base)
    return BenchResult("engine_overhead", [table], figures, time.perf_counter() - started)
