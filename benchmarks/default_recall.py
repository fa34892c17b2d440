"""Benchmark 16: what an ordinary turn reads at the app's defaults, semantic recall on vs off.

Semantic recall is on by default (docs/decisions.md D-46), and with it recall also takes the
room a short window leaves after a fold (D-41). Recalled excerpts come after the history, so
each turn reads them again: this measures what that costs a player, side by side in one run.

The embedded default model at the shipped profile's window (n_ctx 8,192) and recall share
(20%); the conversation of benchmark 8b (400 archived messages, the newest 20 verbatim, as
right after a fold, when the room under the trigger is largest); TURNS ordinary turns after
one warm-up turn, with the shipped all-MiniLM-L6-v2 (every message embedded first) and with
recall by words alone. Per turn: the positions evaluated, the recalled tokens, the prompt time.
"""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.common import BenchResult, Table, default_model_settings, median, ratio
from benchmarks.recall import TURNS, ordinary_turns
from kotonia_tui.config import Settings, app_dirs, load_settings


def _settings(semantic: bool, db: Path) -> Settings:
    shipped = load_settings().all_profiles()["default"]
    return default_model_settings(
        n_ctx=shipped.n_ctx,
        reply_max_tokens=24,
        fold_delay_s=86_400.0,  # ordinary turns: no fold lands while we measure
        prewarm_after_fold=False,
        semantic_recall=semantic,
        db=db,
    )


async def _turns(semantic: bool, folder: Path) -> tuple[list[dict[str, float]], str]:
    path = folder / f"default-recall-{'meaning' if semantic else 'words'}.sqlite3"
    return await ordinary_turns(_settings(semantic, path), path)


async def run() -> BenchResult:
    started = time.perf_counter()
    folder = app_dirs().data / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    meaning, status = await _turns(True, folder)
    if not status.startswith("on:"):  # else the two columns would both be words
        raise RuntimeError(f"semantic recall is not on, so nothing to compare: {status}")
    words, _ = await _turns(False, folder)
    table = Table(
        f"16. An ordinary turn at the defaults, semantic recall on vs off ({TURNS} turns each)",
        ("figure", "words and meaning", "words", "ratio"),
    )
    for label, key in (
        ("median evaluated positions", "evaluated"),
        ("median recalled tokens", "recall_tokens"),
        ("median messages quoted", "quoted"),
        ("median prompt ms", "prompt_ms"),
        ("median prompt positions", "positions"),
    ):
        on, off = median(r[key] for r in meaning), median(r[key] for r in words)
        table.add(label, on, off, ratio(on, off))
    table.notes = [
        f"semantic recall: {status}",
        "n_ctx 8,192 and recall 20% (the shipped profile's); 400 archived messages, the newest "
        "20 verbatim (right after a fold: the room under the trigger is at its largest)",
    ]
    figures = {"meaning": meaning, "words": words, "semantic": status}
    return BenchResult("default_recall", [table], figures, time.perf_counter() - started)
