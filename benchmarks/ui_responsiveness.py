"""Benchmark 5: the largest event-loop stall while a reply streams and a fold runs.

Tiny real models: the chat model never emits end-of-text (`eos_bias=-30`), so a reply streams
until its cap of `REPLY_TOKENS`; the conversation is prepared in the database with enough history
and a due fold job, so the fold worker claims it as the app starts and the chronicler's call runs
beside the streaming reply (the engine's owner thread interleaves them, the user turn first).

A probe task sleeps 10 ms in a loop and records how late it wakes: the largest lateness is the
longest the event loop (and so the UI) was blocked. Two arms:

* the Textual app (`KotoniaApp` under `App.run_test`, driven by Pilot): the conversation opens,
  a message is typed and sent, and the probe runs from Enter until the reply and the fold ended;
* the chat service alone (no UI), the same conversation and the same window: what the service
  itself costs the loop.

If the app cannot be driven (the TUI is changing under other hands), its row says why and the
service arm still reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import BenchResult, Table, median, tiny_settings, write_card
from benchmarks.turn_assembly import bench_dir
from kotonia_tui.chat.bootstrap import open_service
from kotonia_tui.config import Settings
from kotonia_tui.domain import FoldJob, FoldKind, FoldStatus, utcnow
from kotonia_tui.store import Store
from tests.history import seed_conversation
from tests.tiny_models import write_tiny_llama

REPLY_TOKENS = 600
HISTORY = 30
PROBE_S = 0.010


class Probe:
    """Wakes every 10 ms and records how late each wake-up was."""

    def __init__(self) -> None:
        self.lateness: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(PROBE_S)
            self.lateness.append(max(0.0, time.perf_counter() - started - PROBE_S) * 1000)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> dict[str, float]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        ordered = sorted(self.lateness)
        p99 = ordered[int(len(ordered) * 0.99)] if ordered else 0.0
        return {
            "max_stall_ms": round(max(ordered, default=0.0), 2),
            "p99_ms": round(p99, 2),
            "median_ms": round(median(ordered), 2),
            "wakeups": len(ordered),
        }


def _model() -> Path:
    path = bench_dir() / "tiny-llama-noeos.gguf"
    if not path.exists():
        write_tiny_llama(path, eos_bias=-30.0)
    return path


def _settings(model: Path) -> Settings:
    return tiny_settings(model, n_ctx=2048, reply_max_tokens=REPLY_TOKENS, summary_max_tokens=256)


def _prepare_db(path: Path, model: Path) -> int:
    """A conversation with history and a due chapter job over its oldest messages."""
    path.unlink(missing_ok=True)
    key = f"{model.name}:{model.stat().st_size}"  # the engine's model_key: counts are cached
    with Store.open(path) as store:
        ids = seed_conversation(store, HISTORY, token_key=key)
        conv_id = store.get_message(ids[0]).conversation_id
        assert conv_id is not None
        store.enqueue_fold(
            FoldJob(
                conversation_id=conv_id,
                kind=FoldKind.CHAPTER,
                first_message_id=ids[0],
                last_message_id=ids[HISTORY // 2],
                not_before=utcnow(),
            )
        )
        return conv_id


def _fold_open(path: Path, conv_id: int) -> bool:
    with Store.open(path) as store:
        jobs = store.fold_jobs(conv_id)
    return any(j.status is FoldStatus.RUNNING or j.attempts == 0 for j in jobs)


async def _wait(condition: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the reply or the fold did not end in time")
        await asyncio.sleep(0.05)


async def _service_arm(db: Path, conv_id: int, settings: Settings) -> dict[str, Any]:
    service = await asyncio.to_thread(open_service, settings, db=db)
    probe = Probe()
    try:
        probe.start()
        await service.start()  # the worker claims the due job at once
        turn = await service.send(conv_id, "Tell me a very long story about the lamps.")
        deltas = 0
        async for _event in turn:
            deltas += 1
        await service.worker.wait_settled(conv_id)
        figures = await probe.stop()
        jobs = service.store.fold_jobs(conv_id)
        figures.update(
            {
                "deltas": deltas,
                "generated": turn.done.metrics.generated if turn.done and turn.done.metrics else 0,
                "fold_attempts": sum(j.attempts for j in jobs),
            }
        )
        return figures
    finally:
        await service.close()


async def _app_arm(db: Path, conv_id: int, settings: Settings) -> dict[str, Any]:
    from kotonia_tui.tui.app import KotoniaApp
    from kotonia_tui.tui.screens.chat import ChatScreen

    app = KotoniaApp(settings, db=db, open_conversation_id=conv_id)
    probe = Probe()
    async with app.run_test(size=(120, 40)) as pilot:
        await asyncio.wait_for(app.wait_service(), 60)
        await _wait(lambda: isinstance(app.screen, ChatScreen), 30)
        screen: Any = app.screen
        await pilot.pause()
        probe.start()
        ended = screen.turns_ended
        screen.query_one("#input").insert("Tell me a very long story about the lamps.")
        await pilot.press("enter")
        await _wait(lambda: screen.turns_ended > ended and not screen.streaming)
        await _wait(lambda: not _fold_open(db, conv_id))
        figures = await probe.stop()
        await app.close_service()
    figures["fold_attempts"] = 1
    return figures


async def run() -> BenchResult:
    started = time.perf_counter()
    write_card()  # the same key ("wren") as the seeded conversation's card
    model = _model()
    settings = _settings(model)
    template = bench_dir() / "ui-template.sqlite3"
    conv_id = _prepare_db(template, model)
    results: dict[str, dict[str, Any]] = {}
    for arm, runner in (("Textual app (Pilot)", _app_arm), ("chat service alone", _service_arm)):
        db = bench_dir() / f"ui-{len(results)}.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        shutil.copyfile(template, db)
        try:
            results[arm] = await runner(db, conv_id, settings)
        except Exception as exc:  # the TUI is built concurrently; report why, keep going
            results[arm] = {"error": f"{type(exc).__name__}: {exc}"}
    table = Table(
        f"5. UI responsiveness: event-loop stall while a {REPLY_TOKENS}-token reply streams "
        "and a fold runs (tiny models)",
        ("arm", "largest stall ms", "p99 ms", "median ms", "10 ms wake-ups"),
    )
    for arm, row in results.items():
        if "error" in row:
            table.add(arm, f"not measured ({row['error'][:60]})", None, None, None)
        else:
            table.add(arm, row["max_stall_ms"], row["p99_ms"], row["median_ms"], row["wakeups"])
    table.notes = [
        "a probe sleeps 10 ms in a loop; a stall is how late it woke; measured from Enter (or "
        "send) until the reply ended and the fold job finished",
        "the fold is a real chronicler call on the same engine (owner thread, background "
        "priority); with the never-ending model it is cut at its cap and retried later",
    ]
    return BenchResult("ui_responsiveness", [table], results, time.perf_counter() - started)
