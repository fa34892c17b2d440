"""Benchmark 2: the turn after a conversation with three images, Kotonia against the stock handler.

Both arms run on the same tiny real models (tests/tiny_models.py: a scripted llama GGUF whose
greedy reply is a fixed short line, and an `mlp` mmproj; a 32x32 image is 16 positions), with the
same conversation: a greeting, three user turns each with a different PNG, then a text-only turn.

* Kotonia: `ChatService.send` on one engine; the KV keeps the prefix, images included, so the 4th
  turn evaluates only its new tokens.
* Stock: `llama_cpp.Llama(..., chat_handler=MTMDChatHandler(clip_model_path=...))` and
  `create_chat_completion` with the images as data URIs. It resets the KV and re-encodes every
  image on every call, so its 4th turn evaluates the whole conversation (its `prompt_tokens`).

Each arm runs `REPEATS` fresh conversations; the table shows medians.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import llama_cpp
from llama_cpp.llama_chat_format import MTMDChatHandler

from benchmarks.common import BenchResult, Table, median, ratio, tiny_settings, write_card
from kotonia_tui.chat.bootstrap import open_service
from tests.tiny_models import png_bytes, write_scripted_llama, write_tiny_mmproj

REPEATS = 5
REPLY = "The lamp is lit and the sea is calm."
LINES = (
    "Look at this picture of the harbour.",
    "And this one, from the cliff path.",
    "Here is the last one, the lamp room.",
    "Which of the three do you like best?",
)
COLORS = ((200, 120, 40), (40, 120, 200), (90, 200, 90))


def _models(folder: Path) -> tuple[Path, Path]:
    model = write_scripted_llama(folder / "bench-scripted.gguf", REPLY)
    mmproj = write_tiny_mmproj(folder / "bench-mmproj.gguf", text_n_embd=64)
    return model, mmproj


async def _kotonia(model: Path, mmproj: Path, pictures: list[Path]) -> list[dict[str, Any]]:
    settings = tiny_settings(model, mmproj=mmproj, n_ctx=2048, reply_max_tokens=32)
    key = write_card()
    service = await asyncio.to_thread(open_service, settings)
    await service.start()
    turns = []
    try:
        conv = service.new_conversation(service.library.get(key))
        assert conv.id is not None
        for index, line in enumerate(LINES):
            images = [service.attach_image(pictures[index])] if index < len(pictures) else []
            started = time.perf_counter()
            turn = await service.send(conv.id, line, images)
            done = await turn.wait()
            wall = (time.perf_counter() - started) * 1000
            if done.error or done.metrics is None:
                raise RuntimeError(f"Kotonia turn {index + 1} failed: {done.error}")
            turns.append(
                {
                    "positions": done.metrics.prompt_positions,
                    "evaluated": done.metrics.evaluated,
                    "prompt_ms": done.metrics.prompt_ms,
                    "turn_ms": wall,
                }
            )
    finally:
        await service.close()
    return turns


def _stock(model: Path, mmproj: Path, pictures: list[Path]) -> list[dict[str, Any]]:
    # The stock handler prints through C stdio even with verbose=False in places; keep it quiet.
    with open(os.devnull, "w") as sink, contextlib.redirect_stderr(sink):
        llm = llama_cpp.Llama(
            model_path=str(model),
            n_ctx=2048,
            n_threads=2,
            n_batch=512,
            chat_handler=MTMDChatHandler(clip_model_path=str(mmproj), verbose=False),
            verbose=False,
        )
    greeting = str(write_card_greeting())
    # llama-cpp-python types each message as one of its TypedDicts; these are built as plain
    # dicts (image parts included), so they are Any to it.
    messages: list[Any] = [
        {"role": "system", "content": "You are Wren, who keeps the lighthouse."},
        {"role": "assistant", "content": greeting},
    ]
    turns = []
    try:
        for index, line in enumerate(LINES):
            content: list[dict[str, Any]] = []
            if index < len(pictures):
                data = base64.b64encode(pictures[index].read_bytes()).decode()
                url = f"data:image/png;base64,{data}"
                content.append({"type": "image_url", "image_url": {"url": url}})
            content.append({"type": "text", "text": line})
            messages.append({"role": "user", "content": content})
            started = time.perf_counter()
            response: Any = llm.create_chat_completion(
                messages=messages,
                max_tokens=32,
                temperature=0.0,
            )
            wall = (time.perf_counter() - started) * 1000
            reply = response["choices"][0]["message"]["content"] or ""
            messages.append({"role": "assistant", "content": reply})
            prompt = int(response["usage"]["prompt_tokens"])
            # The handler resets the KV first: every prompt position is evaluated again.
            turns.append({"positions": prompt, "evaluated": prompt, "turn_ms": wall})
    finally:
        llm.close()
    return turns


def write_card_greeting() -> str:
    from benchmarks.common import CARD

    data = CARD["data"]
    assert isinstance(data, dict)
    return str(data["first_mes"])


async def run() -> BenchResult:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kotonia-bench-images-") as tmp:
        folder = Path(tmp)
        model, mmproj = _models(folder)
        pictures = []
        for index, color in enumerate(COLORS):
            path = folder / f"picture-{index}.png"
            path.write_bytes(png_bytes((32, 32), color))
            pictures.append(path)
        kotonia = [await _kotonia(model, mmproj, pictures) for _ in range(REPEATS)]
        stock = [await asyncio.to_thread(_stock, model, mmproj, pictures) for _ in range(REPEATS)]

    table = Table(
        "2. Images: the turn after three images (tiny llama + tiny mlp mmproj)",
        (
            "turn",
            "Kotonia positions",
            "Kotonia evaluated",
            "Kotonia ms",
            "stock evaluated",
            "stock ms",
            "evaluated ratio",
            "ms ratio",
        ),
    )
    per_turn = []
    for index in range(len(LINES)):
        k_eval = median(run[index]["evaluated"] for run in kotonia)
        k_ms = median(run[index]["turn_ms"] for run in kotonia)
        s_eval = median(run[index]["evaluated"] for run in stock)
        s_ms = median(run[index]["turn_ms"] for run in stock)
        row = {
            "turn": index + 1,
            "kotonia_positions": median(run[index]["positions"] for run in kotonia),
            "kotonia_evaluated": k_eval,
            "kotonia_turn_ms": round(k_ms, 2),
            "kotonia_prompt_ms": round(median(run[index]["prompt_ms"] for run in kotonia), 2),
            "stock_evaluated": s_eval,
            "stock_turn_ms": round(s_ms, 2),
        }
        per_turn.append(row)
        table.add(
            index + 1,
            row["kotonia_positions"],
            k_eval,
            k_ms,
            s_eval,
            s_ms,
            ratio(k_eval, s_eval),
            ratio(k_ms, s_ms),
        )
    table.notes = [
        f"medians of {REPEATS} fresh conversations per arm; ms is the whole turn (send to done)",
        "stock = llama_cpp.Llama + MTMDChatHandler + create_chat_completion with data URIs; it "
        "resets the KV on every call, so evaluated = its prompt_tokens",
        "positions differ a little: the stock arm renders the template itself (no card setup)",
    ]
    fourth = per_turn[-1]
    figures = {
        "per_turn": per_turn,
        "turn4_evaluated_ratio": ratio(fourth["kotonia_evaluated"], fourth["stock_evaluated"]),
        "turn4_ms_ratio": ratio(fourth["kotonia_turn_ms"], fourth["stock_turn_ms"]),
    }
    return BenchResult("images", [table], figures, time.perf_counter() - started)


if __name__ == "__main__":  # pragma: no cover - a quick look at one benchmark
    result = asyncio.run(run())
    for t in result.tables:
        print(t.render())
