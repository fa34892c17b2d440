"""Benchmark 1: the prompt cache over a long conversation with folds, on the embedded default.

A scripted conversation (`common.USER_LINES`) runs for 300 turns on Gemma 3 270M with a small
window (n_ctx 2048) so that it folds many times and runs major GCs. Between turns the benchmark
waits for the background folds and the prewarm to finish, as a person typing the next line would.

Per turn it records the positions evaluated against the ideal:

    ideal = prompt_positions - LCP(new prompt tokens, tokens the chat KV held after the last turn)

that is, the tokens of the new prompt that are not a prefix of what the chat context already held
(the previous prompt and the reply the model generated). On an ordinary turn that is the new user
line, the reply's last token and the transcript separators. On the turn that applies a fold, the
memory block changed, so the ideal is everything after it; with prewarm on, that work was done in
the background on the spare context, so the applying turn evaluates far less than its ideal.

The re-read arm is what llama-cpp-python's stock multimodal handler does: it clears the KV and
evaluates the whole prompt on every call. It is measured on a sample of turns (every 25th, from
the 25th) by evaluating the same tokens on a fresh `llama_cpp.Llama` context of the same model,
threads and batch size, and extrapolated to every turn with a least-squares line
ms = a + b * positions fitted on the samples.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import llama_cpp

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
from kotonia_tui.chat.events import FoldProgress, FoldState, ServiceEvent
from kotonia_tui.domain import FoldKind
from kotonia_tui.engine import LlamaEngine, Slot
from kotonia_tui.engine.items import common_prefix

SAMPLE_EVERY = 25  # re-read samples cost a whole prompt each: ~3-4 s on 2 cores


@dataclass
class TurnRecord:
    index: int
    kind: str  # ordinary | applying | forced-cut
    positions: int
    reused: int
    evaluated: int
    ideal: int
    prompt_ms: float
    generated: int
    reread_ms: float | None = None


class _PrewarmLog(logging.Handler):
    """Collects the prewarm figures the service logs (positions evaluated, ms)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[tuple[int, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("prewarmed conversation"):
            _conv, positions, ms = record.args or (0, 0, 0.0)
            assert isinstance(positions, int) and isinstance(ms, float)
            self.records.append((positions, ms))


def _fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares ms = a + b * positions."""
    n = len(points)
    if n < 2:
        return 0.0, (points[0][1] / points[0][0]) if points else 0.0
    mx = sum(p for p, _ in points) / n
    my = sum(m for _, m in points) / n
    var = sum((p - mx) ** 2 for p, _ in points)
    b = sum((p - mx) * (m - my) for p, m in points) / var if var else 0.0
    return my - b * mx, b


async def _conversation(turns: int, prewarm: bool, reread: bool) -> dict[str, Any]:
    settings = default_model_settings(
        n_ctx=2048,
        reply_max_tokens=32,
        prewarm_after_fold=prewarm,
        # A fold every ~10 turns and a major GC every few chapters, instead of one every ~6
        # turns and a GC after nearly every chapter with the 2048-token defaults: the run
        # still folds and collects many times, within the time budget.
        min_verbatim_ratio=0.10,
        fold_headroom_ratio=0.36,
        major_gc_ratio=0.15,
        # The app's own chronicler path (the transcript format's lead and stops make the base
        # model write a paragraph); a low ceiling keeps a rambling chapter from costing
        # minutes. A cut one is discarded and counted as a failed fold attempt.
        summary_max_tokens=192,
    )
    key = write_card()
    service = await asyncio.to_thread(open_service, settings)
    engine = service.engine
    await service.start()
    folds: list[tuple[str, float, str]] = []  # kind, seconds, state

    def on_event(event: ServiceEvent) -> None:
        if isinstance(event, FoldProgress) and event.state in (FoldState.LANDED, FoldState.FAILED):
            folds.append((event.job.kind.value, event.elapsed_s, event.state))

    service.subscribe(on_event)
    prewarm_log = _PrewarmLog()
    service_log = logging.getLogger("kotonia_tui.chat.service")
    service_log.addHandler(prewarm_log)
    service_log.setLevel(logging.INFO)
    reference = None
    assert isinstance(engine, LlamaEngine)  # the benchmark reads the in-process engine's KV
    if reread:
        info = engine.info
        reference = llama_cpp.Llama(
            model_path=str(info.model_path),
            n_ctx=info.n_ctx,
            n_threads=info.threads,
            n_threads_batch=info.threads,
            n_batch=512,
            verbose=False,
        )
    records: list[TurnRecord] = []
    started = time.perf_counter()
    try:
        conv = service.new_conversation(service.library.get(key))
        assert conv.id is not None
        for index in range(turns):
            chat = engine._slots.get(Slot.CHAT)  # what the chat KV holds now
            held = [i for i in chat._items if isinstance(i, int)] if chat else []
            turn = await service.send(conv.id, user_line(index))
            text = engine.render(turn.prepared.request).text
            tokens = engine._tokenize_prompt_text(text)
            done = await turn.wait()
            if done.error is not None or done.metrics is None:
                raise RuntimeError(f"turn {index} failed: {done.error}")
            plan = turn.prepared.plan
            kind = "applying" if plan.apply_landed else "ordinary"
            if plan.forced_cut_through is not None:
                kind = "forced-cut"
            metrics = done.metrics
            record = TurnRecord(
                index=index,
                kind=kind,
                positions=metrics.prompt_positions,
                reused=metrics.reused,
                evaluated=metrics.evaluated,
                ideal=max(1, len(tokens) - common_prefix(held, tokens)),
                prompt_ms=metrics.prompt_ms,
                generated=metrics.generated,
            )
            # A person reads the reply and types the next line: the folds run meanwhile.
            await service.worker.wait_settled(conv.id)
            if service._prewarm_task is not None:
                await service._prewarm_task
            if reference is not None and index % SAMPLE_EVERY == SAMPLE_EVERY - 1:
                reference.reset()
                t0 = time.perf_counter()
                reference.eval(tokens)
                record.reread_ms = (time.perf_counter() - t0) * 1000
            records.append(record)
        wall = time.perf_counter() - started
        chapters = service.store.chapters(conv.id, include_in_synopsis=True)
        synopses = service.store.synopsis_versions(conv.id)
        chapter_ms = [c.gen_ms for c in chapters if c.gen_ms]
        synopsis_ms = [s.gen_ms for s in synopses if s.gen_ms]
        failed = [f for f in folds if f[2] == "failed"]
    finally:
        service_log.removeHandler(prewarm_log)
        if reference is not None:
            reference.close()
        await service.close()
    return {
        "records": records,
        "wall_s": wall,
        "chapters": len(chapters),
        "major_gcs": len(synopses),
        "chapter_ms": chapter_ms,
        "synopsis_ms": synopsis_ms,
        "chapter_wall_s": [s for k, s, st in folds if k != FoldKind.MAJOR_GC and st == "landed"],
        "gc_wall_s": [s for k, s, st in folds if k == FoldKind.MAJOR_GC and st == "landed"],
        "failed_folds": len(failed),
        "prewarms": prewarm_log.records,
    }


def _summarize(run: dict[str, Any]) -> dict[str, Any]:
    records: list[TurnRecord] = run["records"]
    ordinary = [r for r in records if r.kind == "ordinary"]
    applying = [r for r in records if r.kind == "applying"]
    samples = [(r.positions, r.reread_ms) for r in records if r.reread_ms is not None]
    a, b = _fit(samples)
    kotonia_ms = sum(r.prompt_ms for r in records)
    reread_est_ms = sum(a + b * r.positions for r in records) if samples else None
    sampled = [r for r in records if r.reread_ms is not None]
    return {
        "turns": len(records),
        "wall_s": round(run["wall_s"], 1),
        "ordinary_turns": len(ordinary),
        "applying_turns": len(applying),
        "forced_cut_turns": sum(1 for r in records if r.kind == "forced-cut"),
        "median_evaluated_ordinary": median(r.evaluated for r in ordinary),
        "median_ideal_ordinary": median(r.ideal for r in ordinary),
        "median_ratio_ordinary": median(r.evaluated / r.ideal for r in ordinary),
        "median_positions": median(r.positions for r in records),
        "applying": [
            {
                "turn": r.index,
                "positions": r.positions,
                "evaluated": r.evaluated,
                "ideal": r.ideal,
                "ratio": ratio(r.evaluated, r.ideal),
                "prompt_ms": round(r.prompt_ms, 1),
                "reread_ms_fit": round(a + b * r.positions, 1) if samples else None,
            }
            for r in applying
        ],
        "prompt_ms_total": round(kotonia_ms, 1),
        "reread_ms_total_estimated": round(reread_est_ms, 1) if reread_est_ms else None,
        "reread_fit_ms": {"a": round(a, 2), "b_per_position": round(b, 4)},
        "sampled_turns": len(sampled),
        "sampled_kotonia_ms": round(sum(r.prompt_ms for r in sampled), 1),
        "sampled_reread_ms": round(sum(r.reread_ms or 0 for r in sampled), 1),
        "chapters": run["chapters"],
        "major_gcs": run["major_gcs"],
        "failed_folds": run["failed_folds"],
        "chapter_gen_ms_median": round(median(run["chapter_ms"]), 1),
        "synopsis_gen_ms_median": round(median(run["synopsis_ms"]), 1),
        "chapter_wall_s_median": round(median(run["chapter_wall_s"]), 2),
        "gc_wall_s_median": round(median(run["gc_wall_s"]), 2),
        "prewarms": len(run["prewarms"]),
        "prewarm_evaluated_median": median(p for p, _ in run["prewarms"]),
        "prewarm_ms_median": round(median(ms for _, ms in run["prewarms"]), 1),
    }


async def run(turns: int = 300, compare_prewarm_off: int = 0) -> BenchResult:
    """`compare_prewarm_off`: turns of a second run with prewarm off (0 skips it)."""
    started = time.perf_counter()
    on = _summarize(await _conversation(turns, prewarm=True, reread=True))
    off = None
    if compare_prewarm_off:
        off = _summarize(await _conversation(compare_prewarm_off, prewarm=False, reread=False))

    main = Table(
        f"1. Prompt cache: {on['turns']} turns on the embedded default (Gemma 3 270M, n_ctx 2048)",
        ("figure", "value"),
    )
    main.add(
        "turns (ordinary / applying a fold / forced cut)",
        f"{on['ordinary_turns']} / {on['applying_turns']} / {on['forced_cut_turns']}",
    )
    main.add("median prompt positions per turn", on["median_positions"])
    main.add("median evaluated, ordinary turn", on["median_evaluated_ordinary"])
    main.add("median ideal (new tokens), ordinary turn", on["median_ideal_ordinary"])
    main.add("median ratio evaluated / ideal, ordinary", round(on["median_ratio_ordinary"], 3))
    main.add("prompt-eval ms, all turns (Kotonia)", on["prompt_ms_total"])
    main.add("prompt-eval ms, all turns (re-read, extrapolated)", on["reread_ms_total_estimated"])
    main.add(
        "ratio Kotonia / re-read (all turns, extrapolated)",
        ratio(on["prompt_ms_total"], on["reread_ms_total_estimated"] or 0),
    )
    main.add(
        f"ratio Kotonia / re-read ({on['sampled_turns']} sampled turns, measured)",
        ratio(on["sampled_kotonia_ms"], on["sampled_reread_ms"]),
    )
    main.add("chapters written / major GCs", f"{on['chapters']} / {on['major_gcs']}")
    main.add("failed fold attempts", on["failed_folds"])
    main.add("chapter: median generation ms (model call)", on["chapter_gen_ms_median"])
    main.add("chapter: median job wall s", on["chapter_wall_s_median"])
    main.add("major GC: median generation ms (model call)", on["synopsis_gen_ms_median"])
    main.add("major GC: median job wall s", on["gc_wall_s_median"])
    main.add(
        "prewarms / median positions / median ms",
        f"{on['prewarms']} / {on['prewarm_evaluated_median']:.0f} / {on['prewarm_ms_median']:.0f}",
    )
    main.add("wall s (turns + folds + sampling)", on["wall_s"])
    main.notes = [
        "ideal = prompt positions - longest common token prefix with what the chat KV held",
        f"re-read arm: whole prompt on a fresh llama_cpp.Llama context, every {SAMPLE_EVERY}th "
        "turn, extrapolated with a line fitted on those samples "
        f"(ms = {on['reread_fit_ms']['a']} + {on['reread_fit_ms']['b_per_position']} * positions)",
        "between turns the benchmark waits for the folds and the prewarm (a person typing)",
        "chapters come from the app's own chronicler (the transcript format's lead and "
        "stops); summary_max_tokens is 192 here, and a cut summary is discarded",
    ]
    folds = Table(
        "1b. Turns that applied a fold (prewarm on)",
        (
            "turn",
            "positions",
            "evaluated",
            "ideal",
            "evaluated/ideal",
            "prompt ms",
            "re-read ms (fit)",
        ),
    )
    for row in on["applying"]:
        folds.add(
            row["turn"],
            row["positions"],
            row["evaluated"],
            row["ideal"],
            row["ratio"],
            row["prompt_ms"],
            row["reread_ms_fit"],
        )
    folds.notes = [
        "with prewarm on, the post-fold prompt was evaluated in the background on the spare "
        "context, so the applying turn evaluates less than what changed (ratio < 1)"
    ]
    tables = [main, folds]
    figures: dict[str, Any] = {"prewarm_on": on}
    if off is not None:
        cmp = Table(
            f"1c. Prewarm on vs off ({off['turns']} turns with prewarm off)",
            ("applying turns", "median evaluated", "median ideal", "median prompt ms"),
        )
        for name, arm in (("prewarm on", on), ("prewarm off", off)):
            rows = arm["applying"]
            cmp.add(
                f"{name} ({len(rows)})",
                median(r["evaluated"] for r in rows),
                median(r["ideal"] for r in rows),
                median(r["prompt_ms"] for r in rows),
            )
        tables.append(cmp)
        figures["prewarm_off"] = off
    return BenchResult("prompt_cache", tables, figures, time.perf_counter() - started)
