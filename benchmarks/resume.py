"""Benchmark 7: resume. The first turn of a ~5,000-token conversation cold, restored from its
saved KV state after a restart, and warm, on the embedded default (Gemma 3 270M).

The conversation is written into the store (canned lines, no generation) until the prompt
holds about 5,000 tokens. Then, in one chat service:

    cold      the first turn: nothing saved yet, the whole prompt is evaluated
    warm      the next turn, in the same process, after the settle (the user read the reply)

the service closes (the engine saves the chat context), and a new service, with a new llama
context and an empty KV cache as after a restart, runs

    restored  its first turn: the conversation's saved state is loaded, the rest evaluated

Prompt ms includes reading and checking the state file (it was just written, so it is in the
page cache, as after a quick restart). The new service in this process stands for a new
process: the KV cache is per context, and the context is new. A new conversation with the same
card in the restarted service shows the setup's saved state (its first turn starts warm).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    BenchResult,
    Table,
    default_model_settings,
    ratio,
    user_line,
    write_card,
)
from kotonia_tui.chat.bootstrap import open_service, state_cache_config
from kotonia_tui.chat.service import ChatService
from kotonia_tui.config import Settings
from kotonia_tui.domain import Message, Role, TurnMetrics

TARGET_TOKENS = 5000
N_CTX = 12288  # room for 5,000 tokens of history below the fold trigger

REPLY = (
    "*Wren sets the kettle on the iron stove and turns the lamp down a little.* "
    '"The storm came in fast tonight, the way they do in late autumn ({n}). My father used to '
    'say the sea keeps a ledger, and every ship that passes is written in it." She glances at '
    "the brass compass on the shelf, then back at you."
)


def _settings() -> Settings:
    return default_model_settings(
        n_ctx=N_CTX,
        reply_max_tokens=32,
        fold_trigger_ratio=0.6,
        fold_ceiling_ratio=0.7,
    )


async def _fill(service: ChatService, conv_id: int, setup_tokens: int) -> int:
    """Alternate user and character lines until the prompt holds about TARGET_TOKENS."""
    total, index = setup_tokens, 0
    while total < TARGET_TOKENS:
        for role, speaker, text in (
            (Role.USER, service.persona.name, user_line(index)),
            (Role.CHARACTER, "Wren", REPLY.format(n=index)),
        ):
            message = service.store.add_message(
                Message(conversation_id=conv_id, role=role, speaker=speaker, text=text)
            )
            total += service.prompter.message_tokens(message)
        index += 1
    return total


async def _turn(service: ChatService, conv_id: int, text: str) -> TurnMetrics:
    done = await (await service.send(conv_id, text)).wait()
    if done.error is not None or done.metrics is None:
        raise RuntimeError(f"the turn failed: {done.error}")
    await service.states_settled()  # the user reads the reply: the settle runs
    return done.metrics


def _row(table: Table, arm: str, m: TurnMetrics) -> None:
    table.add(arm, m.prompt_positions, m.reused, m.restored, m.evaluated, round(m.prompt_ms, 1))


async def run() -> BenchResult:
    started = time.perf_counter()
    settings = _settings()
    key = write_card()
    service = await asyncio.to_thread(open_service, settings)
    await service.start()
    try:
        card = service.library.get(key)
        conv = service.new_conversation(card)
        setup = service.setup_for(card)
        filled = await _fill(service, conv.id, service.prompter.setup_tokens(setup.system_text))
        cold = await _turn(service, conv.id, user_line(1000))
        warm = await _turn(service, conv.id, user_line(1001))
    finally:
        await service.close()
    folder = state_cache_config(settings).folder
    sizes = {p.name.split("-", 1)[1]: p.stat().st_size for p in folder.glob("*.kvstate")}
    service = await asyncio.to_thread(open_service, settings)
    await service.start()
    try:
        restored = await _turn(service, conv.id, user_line(1002))
        fresh = service.new_conversation(service.library.get(key))
        second = await _turn(service, fresh.id, user_line(0))
    finally:
        await service.close()

    conv_bytes = next((v for k, v in sizes.items() if k.startswith("conversation-")), 0)
    setup_bytes = next((v for k, v in sizes.items() if k.startswith("setup-")), 0)
    table = Table(
        f"7. Resume: the first turn of a {filled:,}-token conversation "
        f"(embedded default, n_ctx {N_CTX:,})",
        ("arm", "prompt positions", "reused", "restored", "evaluated", "prompt ms"),
    )
    _row(table, "cold (first turn, nothing saved)", cold)
    _row(table, "restored (first turn after a restart)", restored)
    _row(table, "warm (next turn, same process)", warm)
    _row(table, "new conversation, same card, after a restart", second)
    table.notes = [
        f"ratio restored / warm, prompt ms: {ratio(restored.prompt_ms, warm.prompt_ms)}; "
        f"cold / restored: {ratio(cold.prompt_ms, restored.prompt_ms)}",
        f"saved state files: conversation {conv_bytes / 1e6:.1f} MB, setup "
        f"{setup_bytes / 1e6:.1f} MB ({Path(folder).name}/ in the cache dir)",
        "restored prompt ms includes reading and checking the state file (page cache warm)",
        "each arm's prompt ends with a different new line; the history is the same",
    ]
    figures: dict[str, Any] = {
        "history_tokens": filled,
        "cold": cold.model_dump(),
        "restored": restored.model_dump(),
        "warm": warm.model_dump(),
        "new_conversation": second.model_dump(),
        "ratio_restored_warm_ms": ratio(restored.prompt_ms, warm.prompt_ms),
        "state_file_bytes": sizes,
    }
    return BenchResult("resume", [table], figures, time.perf_counter() - started)
