"""A reply never shares the cores with work that can wait (issue 34): the saved-state writer
and the embedding model pause while a reply is being made, and a reply that starts waits for
the one unit in progress. The real chat service, the real engine, tiny models.

The engine's foreground gate keeps a log of what ran when (`ActivityLog`, a test hook): each
reply from its first step to its last, each unit of background work (a chunk of a state file,
a piece of text embedded, a background step on the owner thread). The log also stretches
each unit of background work to at least `HOLD_S`, as a slow disk or a big embedding model
would: tiny models finish everything in milliseconds, so without it a unit that runs beside
a reply could slip between two of its steps unseen.
"""

from __future__ import annotations

import asyncio
import ctypes
from collections.abc import Iterator

import pytest

from kotonia_tui.engine import GenerationRequest, LlamaEngine
from kotonia_tui.engine.foreground import (
    EMBEDDING,
    FOREGROUND,
    MODEL_BACKGROUND,
    REPLY,
    STATE_WRITE,
    ActivityLog,
)
from kotonia_tui.engine.state_cache import StateCache
from kotonia_tui.engine.types import ChatMessage
from tests.cards import SHORT_CARD_KEY
from tests.engine.test_saved_states import open_engine

from .test_recall import settings_for

HOLD_S = 0.05
LINES = (
    "Good evening. Is the shop open?",
    "What are you mending?",
    "Whose watch is it?",
    "May I wait here until the rain stops?",
)


@pytest.fixture
def activity() -> Iterator[ActivityLog]:
    log = ActivityLog(hold_background_s=HOLD_S)
    FOREGROUND.log = log
    try:
        yield log
    finally:
        FOREGROUND.log = None


def said(pairs: list[tuple[object, object]]) -> str:
    return "; ".join(f"{reply} overlaps {other}" for reply, other in pairs)


async def test_state_writes_and_embeddings_never_run_beside_a_reply(
    make_service, tiny_model_path, tiny_embedding_path, activity
):
    settings = settings_for(
        tiny_model_path, embedding_model_path=tiny_embedding_path, state_cache_mb=64
    )
    service = await make_service(settings)
    assert service.semantic.active, service.semantic.status
    conv = service.new_conversation(service.library.find(SHORT_CARD_KEY))
    # Sent one after the other, as `kotonia chat --say A --say B --say C` does: the setup's
    # state is written during the first reply's prompt, each settle's state and each turn's
    # vectors while the next turn starts.
    for line in LINES[:3]:
        done = await (await service.send(conv.id, line)).wait()
        assert done.error is None and done.reply is not None
    await service.states_settled()
    await asyncio.wait_for(service.semantic.settled(), 120)
    await service.close()
    # A restart on the same data dir: the first turn loads the saved state.
    service = await make_service(settings)
    done = await (await service.send(conv.id, LINES[3])).wait()
    assert done.error is None and done.metrics is not None
    assert done.metrics.restored > 0  # a state written under the gate is whole and used
    await asyncio.wait_for(service.semantic.settled(), 120)

    # Everything that can wait did run: the log is not empty of what it checks.
    assert len(activity.of(REPLY)) >= 4
    assert activity.of(STATE_WRITE), "no saved state was written"
    assert activity.of(EMBEDDING), "no message was embedded"
    assert activity.of(MODEL_BACKGROUND), "no settle ran"
    assert not activity.overlapping_replies(), said(activity.overlapping_replies())


async def test_a_write_asked_for_during_a_reply_waits_for_it_and_a_reply_waits_for_a_chunk(
    tmp_path, tiny_noeos_model_path, activity
):
    """The two sides of the gate on one engine: a state write queued while a long reply runs
    starts after it; a reply queued while a chunk is being written starts after the chunk."""
    engine: LlamaEngine
    with open_engine(tmp_path, tiny_noeos_model_path) as engine:
        cache = engine._resumer.cache if engine._resumer is not None else None
        assert isinstance(cache, StateCache)
        request = GenerationRequest(
            messages=(ChatMessage("user", "Tell me a very long story."),), max_tokens=400
        )
        buffer = (ctypes.c_uint8 * 4096)(*range(256), *range(256))  # any bytes: a state

        call = engine.start(request)
        while call.tokens_generated < 10:  # the reply is being made: ask for a write now
            await asyncio.sleep(0.001)
        written = cache.save("during-a-reply", (1, 2, 3), buffer)
        result = await call.result()
        assert result.metrics.generated == 400  # still generating when the write was asked
        assert written.result(30) is not None
        (first_reply,) = activity.of(REPLY)[-1:]
        writes = activity.of(STATE_WRITE)
        assert writes and all(w.start >= first_reply.end for w in writes)

        # A write first, then a reply asked for while its chunk is in progress (HOLD_S).
        written = cache.save("before-a-reply", (1, 2, 3), buffer)
        while not FOREGROUND.working:
            await asyncio.sleep(0.001)
        await engine.generate(request)
        assert written.result(30) is not None
        chunk = activity.of(STATE_WRITE)[len(writes)]
        (second_reply,) = activity.of(REPLY)[-1:]
        assert second_reply.start >= chunk.end

    assert not activity.overlapping_replies(), said(activity.overlapping_replies())
