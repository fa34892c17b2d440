"""Benchmark 8c: semantic recall's vector search at 1,000 and 100,000 vectors (issue 16).

The embedded Gemma 3 270M is loaded as the embedding model (640 dimensions, one thread): no
dedicated embedding model can be downloaded here, and a real model is what a turn's query
vector costs. One conversation holds all the messages (the hard case: the search is bounded to
one conversation, so a store of many shorter conversations is cheaper); each message gets a
random unit vector of the model's dimension, stored as the worker stores them. Figures, side
by side at both sizes, median of REPEATS after a warm-up:

- the vector search alone (`Store.similar`: sqlite-vec's exact cosine scan of the
  conversation's vectors older than the window, the 12 nearest, their texts checked);
- the whole recall step with semantic recall on (`Prompter.recall`: BM25, the query's vector,
  the vector search, fusion, neighbours, token counts, the choice within the budget);
- the query's embedding alone, and what embedding one archived message costs the background
  worker (so what a backfill of the archive takes at that rate).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np

from benchmarks.common import Table, default_model_settings, median, ratio, user_line, write_card
from kotonia_tui.chat.bootstrap import open_service
from kotonia_tui.chat.service import ChatService
from kotonia_tui.config import app_dirs
from kotonia_tui.domain import Conversation, Message, Role
from kotonia_tui.engine.default_model import default_model_path

SIZES = (1_000, 100_000)
REPEATS = 9
WINDOW = 20
BATCH = 5_000
EMBED_SAMPLES = 8
RECALL_BUDGET_RATIO = 0.15  # room for a few excerpts at n_ctx 2048 (the default 5% holds one)
REPLY = "The lamp was lit at dusk, as every night, and the keeper wrote it in the log."


def _fill(service: ChatService, key: str, size: int) -> int:
    """One conversation of `size` messages, each with a random unit vector."""
    store = service.store
    conv = store.create_conversation(
        Conversation(character_key=key, character_name="Wren", persona_name="User")
    )
    rng = np.random.default_rng(size)
    dimension = service.semantic.embedder.dimension if service.semantic.embedder else 0
    model_key = service.semantic.model_key
    for start in range(0, size, BATCH):
        store.add_messages(
            conv.id,
            [
                Message(role=Role.USER, speaker="User", text=user_line(i))
                if i % 2 == 0
                else Message(role=Role.CHARACTER, speaker="Wren", text=REPLY)
                for i in range(start, min(size, start + BATCH))
            ],
        )
        pending = store.vectors_pending(model_key, BATCH)
        raw = rng.standard_normal((len(pending), dimension))
        unit = raw / np.linalg.norm(raw, axis=1, keepdims=True)
        store.put_vectors(model_key, list(zip(pending, unit.tolist(), strict=True)))
    start_id = store.recent_messages(conv.id, WINDOW)[0].id
    state = store.memory_state(conv.id)
    store.set_memory_state(state.model_copy(update={"verbatim_start_id": start_id}))
    return conv.id


async def _measure(folder: Path, size: int) -> dict[str, float]:
    path = folder / f"semantic-{size}.sqlite3"
    path.unlink(missing_ok=True)
    key = write_card()
    gemma = default_model_path(app_dirs().cache)
    settings = default_model_settings(
        n_ctx=2048,
        reply_max_tokens=24,
        fold_delay_s=86_400.0,
        prewarm_after_fold=False,
        recall_budget_ratio=RECALL_BUDGET_RATIO,
        embedding_model_path=gemma,
        db=path,
    )
    # Not started: no background worker competes with the timings.
    service = await asyncio.to_thread(open_service, settings, db=path)
    try:
        assert service.semantic.active, service.semantic.status
        conv_id = await asyncio.to_thread(_fill, service, key, size)
        store, semantic, prompter = service.store, service.semantic, service.prompter
        card = service.library.get(key)
        read = await prompter.read(conv_id, card, service.setup_for(card), service.persona)
        decision = prompter.plan(read, queue_by_trigger=False)
        older_than = decision.plan.verbatim_start_id or 0
        query = await semantic.query_vector("Where did the Grey Heron sail with the compass?")
        assert query is not None
        store.similar(conv_id, semantic.model_key, query, older_than, 12)  # warm-up
        await prompter.recall(read, decision)
        search_ms, recall_ms, query_ms = [], [], []
        for _ in range(REPEATS):
            started = time.perf_counter()
            hits = store.similar(conv_id, semantic.model_key, query, older_than, 12)
            search_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            recall = await prompter.recall(read, decision)
            recall_ms.append((time.perf_counter() - started) * 1000)
        assert len(hits) == 12 and recall.semantic
        for index in range(3):
            started = time.perf_counter()
            await semantic.query_vector(f"{user_line(index)}\n{REPLY}")
            query_ms.append((time.perf_counter() - started) * 1000)
        embed_ms = []
        for index in range(EMBED_SAMPLES):
            started = time.perf_counter()
            await semantic.query_vector(user_line(index + 40))
            embed_ms.append((time.perf_counter() - started) * 1000)
        return {
            "search_ms": median(search_ms),
            "recall_ms": median(recall_ms),
            "query_ms": median(query_ms),
            "embed_ms": median(embed_ms),
            "vectors": float(store.vector_counts(semantic.model_key).stored),
            "dimension": float(semantic.embedder.dimension if semantic.embedder else 0),
            "db_mb": path.stat().st_size / 1e6,
            "quoted": float(len(recall.message_ids)),
        }
    finally:
        await service.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


async def vector_table() -> tuple[Table, dict[str, dict[str, float]]]:
    folder = app_dirs().data / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    figures = {str(n): await _measure(folder, n) for n in SIZES}
    small, large = (figures[str(n)] for n in SIZES)
    table = Table(
        f"8c. Semantic recall: vector search at {SIZES[0]:,} and {SIZES[1]:,} vectors",
        ("figure", f"{SIZES[0]:,}", f"{SIZES[1]:,}", "ratio"),
    )
    for label, key in (
        ("vector search ms (Store.similar, k=12)", "search_ms"),
        ("whole recall step ms (BM25 + query vector + search + fusion)", "recall_ms"),
        ("query embedding ms (new line + last reply)", "query_ms"),
        ("embedding one archived message ms (worker, 1 thread)", "embed_ms"),
        ("messages quoted", "quoted"),
        ("vectors stored", "vectors"),
        ("database MB", "db_mb"),
    ):
        table.add(label, small[key], large[key], ratio(large[key], small[key]))
    table.notes = [
        f"one conversation of N messages, the newest {WINDOW} verbatim; Gemma 3 270M as the "
        f"embedding model ({int(large['dimension'])} dimensions, 1 thread), random unit "
        f"vectors stored; recall budget {RECALL_BUDGET_RATIO:.0%} of n_ctx 2048; "
        f"median of {REPEATS} after a warm-up (embeddings: of 3 and "
        f"{EMBED_SAMPLES}); the search is an exact scan of one conversation's vectors",
    ]
    return table, figures
