"""Benchmark 8: recall at turn time (issue 16), on the embedded default model.

1. Recall time per turn at 1,000 and 100,000 archived messages, as a ratio: the whole step a
   turn runs (`Prompter.recall`: the store's BM25 query bounded to one conversation and older
   than the verbatim window, neighbours, message numbers, in-story times, exact token counts,
   the choice within the budget), in the files benchmark 7 builds (conversations of 1,000
   messages, half English, half Japanese, Zipf word frequencies). The verbatim window is the
   conversation's newest 20 messages, as after a fold; the query is its newest user message
   and the reply before it. Median of REPEATS after a warm-up, with the rows the store read.
2. Prompt positions evaluated per ordinary turn with recall on and off: the same archived
   conversation (TURNS ordinary turns after one warm-up turn, no fold lands), the user's lines
   sharing words with the archive so that recall quotes something most turns. The cache must
   still hold: a turn evaluates the new message, the previous reply and the notes (recalled
   excerpts included), never the history before them.
3. Semantic recall's vector search at 1,000 and 100,000 vectors (benchmarks/semantic_recall.py).

Parts 1 and 2 measure recall by words (tests/settings.py: `semantic_recall` off unless an
embedding model is named), without the room under the trigger: the app's default since D-46
adds a vector search (part 3) and, right after a fold, that room.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from benchmarks import search, semantic_recall
from benchmarks.common import (
    BenchResult,
    Table,
    default_model_settings,
    median,
    ratio,
    user_line,
    write_card,
)
from kotonia_tui.chat.bootstrap import open_service
from kotonia_tui.chat.service import ChatService
from kotonia_tui.config import Settings, app_dirs
from kotonia_tui.domain import Conversation, Message, Role

SIZES = (1_000, 100_000)
REPEATS = 9
WINDOW = 20  # messages verbatim, as after a fold
ARCHIVE = 400  # messages of the conversation the turns are played in
TURNS = 8
N_CTX = 2048

# The character's lines in the archive: they name things the user asks about later.
REPLIES = (
    "The compass was my father's; he carried it on the Grey Heron.",
    "I have kept this lighthouse for twenty-two winters.",
    "The autumn storm took the schooner Maribel off the north cliff.",
    "The cat is called Pepper, and she sleeps by the stove.",
    "Your brother's letter mentions the harbor at Skerry Point.",
    "The villagers say the lamp was dark for ten years before me.",
)


def _settings(recall: bool, db: Path) -> Settings:
    return default_model_settings(
        n_ctx=N_CTX,
        reply_max_tokens=24,
        fold_delay_s=86_400.0,  # ordinary turns: no fold lands while we measure
        prewarm_after_fold=False,
        recall_budget_ratio=0.05 if recall else 0.0,
        db=db,
    )


def fold_like(service: ChatService, conv_id: int) -> None:
    """As after a fold: only the newest WINDOW messages are verbatim."""
    start = service.store.recent_messages(conv_id, WINDOW)[0].id
    state = service.store.memory_state(conv_id)
    service.store.set_memory_state(state.model_copy(update={"verbatim_start_id": start}))


async def _recall_times(path: Path, conv_id: int) -> tuple[float, int, int, int]:
    """Median ms of one turn's recall step, messages quoted, rows read, archive size."""
    key = write_card()  # before the service opens its library
    service = await asyncio.to_thread(open_service, _settings(True, path), db=path)
    try:
        fold_like(service, conv_id)
        card = service.library.get(key)
        setup = service.setup_for(card)
        prompter = service.prompter
        read = await prompter.read(conv_id, card, setup, service.persona)
        decision = prompter.plan(read, queue_by_trigger=False)
        await prompter.recall(read, decision)  # warm-up (page cache, counted header)
        times, rows, quoted = [], 0, 0
        for _ in range(REPEATS):
            before = service.store.rows_read
            started = time.perf_counter()
            recall = await prompter.recall(read, decision)
            times.append((time.perf_counter() - started) * 1000)
            rows = service.store.rows_read - before
            quoted = len(recall.message_ids)
        archived = service.store.message_count(conv_id) - WINDOW
        return median(times), quoted, rows, archived
    finally:
        await service.close()


def archive(service: ChatService, card_key: str) -> int:
    conv = service.store.create_conversation(
        Conversation(character_key=card_key, character_name="Wren", persona_name="User")
    )
    messages = []
    for i in range(ARCHIVE):
        if i % 2 == 0:
            messages.append(Message(role=Role.USER, speaker="User", text=user_line(i // 2)))
        else:
            text = REPLIES[(i // 2) % len(REPLIES)]
            messages.append(Message(role=Role.CHARACTER, speaker="Wren", text=text))
    service.store.add_messages(conv.id, messages)
    return conv.id


async def ordinary_turns(settings: Settings, path: Path) -> tuple[list[dict[str, float]], str]:
    """TURNS ordinary turns after a warm-up in the archived conversation, as right after a
    fold (every message embedded first when semantic recall is on): per turn the prompt's
    figures and what recall quoted; and semantic recall's status."""
    path.unlink(missing_ok=True)
    key = write_card()
    service = await asyncio.to_thread(open_service, settings, db=path)
    await service.start()
    try:
        conv_id = archive(service, key)
        fold_like(service, conv_id)
        service.semantic.wake()
        await service.semantic.settled()  # as a session long after its import
        rows = []
        for index in range(TURNS + 1):
            turn = await service.send(conv_id, user_line(index + 3))
            done = await turn.wait()
            assert done.error is None and done.metrics is not None, done.error
            if index == 0:
                continue  # the first turn evaluates the whole prompt
            metrics = done.metrics
            recalled = turn.prepared.recall
            rows.append(
                {
                    "positions": metrics.prompt_positions,
                    "reused": metrics.reused,
                    "evaluated": metrics.evaluated,
                    "prompt_ms": round(metrics.prompt_ms, 1),
                    "recall_tokens": recalled.tokens,
                    "quoted": len(recalled.message_ids),
                    "memory_moved": int(
                        turn.prepared.plan.apply_landed
                        or turn.prepared.plan.forced_cut_through is not None
                    ),
                }
            )
        return rows, service.semantic.status
    finally:
        await service.close()


async def _turns(recall: bool, folder: Path) -> list[dict[str, float]]:
    path = folder / f"recall-turns-{'on' if recall else 'off'}.sqlite3"
    rows, _status = await ordinary_turns(_settings(recall, path), path)
    return rows


async def run() -> BenchResult:
    started = time.perf_counter()
    folder = app_dirs().data / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    timed: dict[int, tuple[float, int, int, int]] = {}
    for n in SIZES:
        path = folder / f"search-{n}.sqlite3"
        if not path.exists():  # benchmark 7 builds the same files
            search.build(path, n)
        conv_id = n // search.CONVERSATION  # the last conversation
        timed[n] = await _recall_times(path, conv_id)
    small, large = SIZES
    times = Table(
        f"8. Recall: one turn's recall step at {small:,} and {large:,} messages",
        ("messages in the store", "recall ms", "quoted", "rows read", "archived in conv"),
    )
    for n in SIZES:
        ms, quoted, rows, archived = timed[n]
        times.add(f"{n:,}", ms, quoted, rows, archived)
    times.add("ratio", ratio(timed[large][0], timed[small][0]), "", "", "")
    times.notes = [
        f"median of {REPEATS} after a warm-up; Prompter.recall with the embedded model's "
        f"tokenizer, budget 5% of n_ctx {N_CTX}; the conversation's newest {WINDOW} are verbatim",
    ]

    on, off = await _turns(True, folder), await _turns(False, folder)
    cache = Table(
        f"8b. Prompt positions per ordinary turn, recall on vs off ({TURNS} turns each)",
        ("figure", "recall on", "recall off"),
    )
    for label, key in (
        ("median prompt positions", "positions"),
        ("median reused", "reused"),
        ("median evaluated", "evaluated"),
        ("median recalled tokens (notes)", "recall_tokens"),
        ("median messages quoted", "quoted"),
    ):
        cache.add(label, median(r[key] for r in on), median(r[key] for r in off))
    cache.add(
        "median evaluated minus recalled tokens",
        median(r["evaluated"] - r["recall_tokens"] for r in on),
        median(r["evaluated"] for r in off),
    )
    cache.add(
        "max evaluated / positions",
        ratio(max(r["evaluated"] for r in on), min(r["positions"] for r in on)),
        ratio(max(r["evaluated"] for r in off), min(r["positions"] for r in off)),
    )
    cache.add(
        "turns with a fold applied or a forced cut",
        sum(r["memory_moved"] for r in on),
        sum(r["memory_moved"] for r in off),
    )
    cache.notes = [
        f"{ARCHIVE} archived messages, the newest {WINDOW} verbatim; each turn evaluates the "
        "previous reply, the new message and the notes after the history; a fold never lands",
    ]
    vectors, vector_figures = await semantic_recall.vector_table()
    figures = {
        "semantic": vector_figures,
        "recall_ms": {str(n): round(t[0], 3) for n, t in timed.items()},
        "recall_rows_read": {str(n): t[2] for n, t in timed.items()},
        "turns_on": on,
        "turns_off": off,
    }
    return BenchResult("recall", [times, cache, vectors], figures, time.perf_counter() - started)
