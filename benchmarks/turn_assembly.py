"""Benchmark 3: time and rows read to assemble one turn at 100 to 50,000 messages.

Each size is a real SQLite file filled by bulk insert (`Store.add_messages`) with the token counts
already cached on the rows, as a long conversation has them, and the memory a long story carries:
a synopsis, four live chapters, and a 40-message verbatim window (`MemoryState`). The benchmark
times `Prompter.prepare(...)` (the whole per-turn assembly: memory state, chapters, synopsis,
open fold jobs, the window, lore, the fold policy, the prompt) and counts `store.rows_read`
before and after. A tiny real model counts the setup's tokens; the rows' counts are cached, so
this measures the store and the policy, not tokenization.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from benchmarks.common import BenchResult, Table, median, ratio, tiny_settings, write_card
from kotonia_tui.chat.bootstrap import open_engine, open_library
from kotonia_tui.chat.prompting import Prompter, memory_tokens
from kotonia_tui.config import Settings, app_dirs
from kotonia_tui.domain import Chapter, Conversation, Message, Role, Synopsis
from kotonia_tui.engine import Engine, EngineInfo
from kotonia_tui.store import MemoryState, Store
from tests.tiny_models import write_tiny_llama

SIZES = (100, 1_000, 10_000, 50_000)
WINDOW = 40
REPEATS = 15


def bench_dir() -> Path:
    path = app_dirs().data / "bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def tiny_model() -> Path:
    path = bench_dir() / "tiny-llama.gguf"
    if not path.exists():
        write_tiny_llama(path)
    return path


def settings_for(model: Path) -> Settings:
    return tiny_settings(model, n_ctx=2048, reply_max_tokens=32)


def build_db(path: Path, n: int, engine: Engine, card_key: str, card_name: str) -> int:
    """A conversation of `n` messages with its memory, in a fresh file; returns its id."""
    path.unlink(missing_ok=True)
    key = engine.model_key
    with Store.open(path) as store:
        store.upsert_character(card_key, card_name, "bench", "")
        conv = store.create_conversation(
            Conversation(character_key=card_key, character_name=card_name, persona_name="User")
        )
        assert conv.id is not None
        msgs = [
            Message(
                role=Role.USER if i % 2 == 0 else Role.CHARACTER,
                speaker="User" if i % 2 == 0 else card_name,
                text=(
                    f"I ask about the ship number {i} and the storm lamps."
                    if i % 2 == 0
                    else f'*{card_name} nods.* "The lamp burned all night, number {i}."'
                ),
                token_counts={key: 14},
            )
            for i in range(n)
        ]
        ids = store.add_messages(conv.id, msgs)
        # The memory of a long story: a synopsis of the oldest part, four live chapters over
        # the rest, and the newest WINDOW messages verbatim.
        folded = ids[: len(ids) - WINDOW]
        quarter = max(1, len(folded) // 5)
        syn_through = folded[quarter - 1]
        for k in range(1, 5):
            part = folded[k * quarter : (k + 1) * quarter] or folded[-1:]
            store.add_chapter(
                Chapter(
                    conversation_id=conv.id,
                    first_message_id=part[0],
                    last_message_id=part[-1],
                    text=f"Chapter {k}: Ann and {card_name} talked about the storm lamps.",
                    tokens=16,
                )
            )
        store.add_synopsis(
            Synopsis(
                conversation_id=conv.id,
                version=1,
                text=f"Ann came to the lighthouse; {card_name} keeps it.",
                through_message_id=syn_through,
                tokens=12,
            ),
            [],
        )
        chapters = store.chapters(conv.id)
        synopsis = store.current_synopsis(conv.id)
        assert isinstance(engine.info, EngineInfo)
        prompter = Prompter(store, engine, settings_for(engine.info.model_path))
        landed = prompter.snapshot(store.memory_rows(conv.id)).landed
        text = landed.block.render()
        assert synopsis is not None and chapters
        store.set_memory_state(
            MemoryState(
                conversation_id=conv.id,
                verbatim_start_id=ids[-WINDOW],
                applied_chapter_id=landed.newest_chapter_id,
                applied_synopsis_id=landed.synopsis_id,
                memory_text=text,
                memory_tokens=memory_tokens(engine, text),
                memory_model_key=key,
            )
        )
        return conv.id


def db_path(n: int) -> Path:
    return bench_dir() / f"assembly-{n}.sqlite3"


def ensure_dbs(engine: Engine, sizes: tuple[int, ...] = SIZES) -> dict[int, int]:
    """Build the files once per run (the memory benchmark reuses them); n -> conversation id."""
    key = write_card()
    card = open_library(settings_for(tiny_model())).get(key)
    return {n: build_db(db_path(n), n, engine, card.key, card.name) for n in sizes}


async def measure(engine: Engine, n: int, conv_id: int) -> dict[str, Any]:
    settings = settings_for(tiny_model())
    library = open_library(settings)
    card = library.get(write_card())
    setup = library.setup(card, settings.persona)
    with Store.open(db_path(n)) as store:
        prompter = Prompter(store, engine, settings)
        await prompter.prepare(conv_id, card, setup, settings.persona)  # warm the page cache
        times, rows = [], []
        for _ in range(REPEATS):
            before = store.rows_read
            started = time.perf_counter()
            prepared = await prompter.prepare(conv_id, card, setup, settings.persona)
            times.append((time.perf_counter() - started) * 1000)
            rows.append(store.rows_read - before)
        assert len(prepared.window) == WINDOW, len(prepared.window)
    return {"messages": n, "ms": round(median(times), 3), "rows_read": int(median(rows))}


async def run() -> BenchResult:
    started = time.perf_counter()
    engine = await asyncio.to_thread(open_engine, settings_for(tiny_model()))
    try:
        build_started = time.perf_counter()
        convs = ensure_dbs(engine)
        build_s = time.perf_counter() - build_started
        results = [await measure(engine, n, convs[n]) for n in SIZES]
    finally:
        engine.close()
    first, last = results[0], results[-1]
    table = Table(
        "3. Turn assembly: Prompter.prepare at growing conversation sizes",
        ("messages", "median ms", "rows read", "ms / ms at 100", "rows / rows at 100"),
    )
    for row in results:
        table.add(
            row["messages"],
            row["ms"],
            row["rows_read"],
            ratio(row["ms"], first["ms"]),
            ratio(row["rows_read"], first["rows_read"]),
        )
    table.notes = [
        f"median of {REPEATS} prepares per size; each conversation carries a synopsis, four "
        f"live chapters and a {WINDOW}-message verbatim window; token counts cached on the rows",
        f"the four files were filled by bulk insert in {build_s:.1f} s",
    ]
    figures = {
        "sizes": results,
        "ms_ratio_50000_100": ratio(last["ms"], first["ms"]),
        "rows_ratio_50000_100": ratio(last["rows_read"], first["rows_read"]),
        "build_s": round(build_s, 2),
    }
    return BenchResult("turn_assembly", [table], figures, time.perf_counter() - started)
