"""The GLM-4.6V-Flash check, run by `scripts/gpu-check` in the venv it prepared.

Three phases on the glm-4.6v-flash profile pointed at the given GGUF and mmproj, in a KOTONIA_HOME
of its own: `kotonia doctor --load` (load time, GPU offload); a scripted conversation with the
shipped card Rowan Ashby through the chat service (the first message shows him a picture, then
short lines until the history crosses the fold trigger, the chapter lands, the next turn applies
it and one more follows); `kotonia eval` on the shipped dataset. Then one block of figures.

`--stand-ins DIR` writes tiny stand-ins of the real pair into DIR under the real names (the
test suite's tests/tiny_glm.py: a scripted glm4 model and a glm4v projector) and checks those,
so the whole script can be run on a machine without the weights or a GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MODEL_NAME = "GLM-4.6V-Flash-Q4_K_M.gguf"
MMPROJ_NAME = "mmproj-GLM-4.6V-Flash-F16.gguf"
PROFILE = "glm-4.6v-flash"
CARD = "rowan-ashby"
BUDGET_S = 600

# The user's side of the scripted conversation: the first line comes with the picture.
LINES = (
    "Good evening. This was my father's pocket watch. Can you tell me anything about it?",
    "It stopped the night he died, at twenty past four. I never had it opened.",
    "My name is Ann Vell, by the way. I came down from Saltmere on the morning coach.",
    "How long would a repair take? I leave again on Friday.",
    "He bought it in Pellmouth, I think, from a shop that is gone now.",
    "Do you always work this late, with the rain coming down like this?",
    "What is that ticking behind the counter? It sounds louder than the rest.",
    "Could you write down what you find inside? I would like to keep a note of it.",
    "I can pay half now and half when I come back for it.",
    "Is there anything engraved inside the case?",
    "My mother said he wound it every night before bed, without fail.",
    "Tell me about the oldest clock in this shop.",
)
STAND_IN_REPLY = "Rowan turns the watch over in his hands and nods slowly."


@dataclass
class TurnRow:
    number: int
    cells: int
    reused: int
    evaluated: int
    prompt_ms: float
    generated: int
    tokens_per_s: float
    images: int
    note: str


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/gpu-check", description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help=f"the text GGUF ({MODEL_NAME})")
    parser.add_argument("--mmproj", type=Path, help=f"its projector ({MMPROJ_NAME})")
    parser.add_argument("--stand-ins", type=Path, metavar="DIR", help="write and check tiny ones")
    parser.add_argument("--home", type=Path, help="KOTONIA_HOME to use (default: a temp dir)")
    parser.add_argument("--chat-n-ctx", type=int, default=8192, help="window of the chat (8192)")
    parser.add_argument("--reply-tokens", type=int, default=320, help="reply cap (320)")
    parser.add_argument(
        "--fold-trigger", type=float, default=0.25, help="fold trigger, share of the window (0.25)"
    )
    parser.add_argument("--max-turns", type=int, default=40, help="turns before giving up (40)")
    parser.add_argument("--eval-source", help="dataset for kotonia eval (default: the shipped one)")
    parser.add_argument("--eval-n-ctx", type=int, default=8192, help="window of the eval (8192)")
    parser.add_argument("--questions", type=int, default=2, help="eval questions per range (2)")
    parser.add_argument("--threads", type=int, help="CPU threads (default: all)")
    parser.add_argument("--build-seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.stand_ins is None and (args.model is None or args.mmproj is None):
        parser.error("give --model and --mmproj (or --stand-ins DIR)")
    return args


def write_stand_ins(folder: Path) -> tuple[Path, Path]:
    """The tiny pair under the real names (gguf and numpy: the app's own dependencies)."""
    sys.path.insert(0, str(REPO))
    import gguf

    from tests.tiny_glm import write_scripted_glm, write_tiny_glm_mmproj

    folder.mkdir(parents=True, exist_ok=True)
    model = write_scripted_glm(folder / MODEL_NAME, STAND_IN_REPLY, n_ctx=16384)
    field = gguf.GGUFReader(model).fields["glm4.embedding_length"]
    width = int(field.parts[field.data[0]][0])  # the projector must fit the model's width
    # The real projector's geometry (14-pixel patches, a 336-pixel position grid), so a picture
    # takes as many KV cells as it would with the real pair.
    mmproj = write_tiny_glm_mmproj(
        folder / MMPROJ_NAME, text_n_embd=width, patch_size=14, image_size=336
    )
    return model, mmproj


def write_config(home: Path, args: argparse.Namespace, model: Path, mmproj: Path) -> None:
    config = home / "config" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        f"profile = {json.dumps(PROFILE)}",
        "fold_delay_s = 0",
        f"fold_trigger_ratio = {args.fold_trigger}",
        f"fold_ceiling_ratio = {min(0.9, args.fold_trigger + 0.1)}",
        f"min_verbatim_ratio = {args.fold_trigger / 3:.3f}",
        f"fold_headroom_ratio = {args.fold_trigger / 3:.3f}",
        "",
        f"[profiles.{json.dumps(PROFILE)}]",
        f"model_path = {json.dumps(str(model))}",
        f"mmproj_path = {json.dumps(str(mmproj))}",
        f"n_ctx = {args.chat_n_ctx}",
        f"reply_max_tokens = {args.reply_tokens}",
        "seed = 1",
    ]
    if args.threads:
        lines.append(f"threads = {args.threads}")
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")


def kotonia(home: Path, *argv: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KOTONIA_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "kotonia_tui", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def draw_watch(path: Path) -> Path:
    """A pocket watch, drawn: the picture the first message shows."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (448, 448), (236, 226, 204))
    draw = ImageDraw.Draw(image)
    draw.ellipse((64, 84, 384, 404), fill=(196, 160, 72), outline=(90, 70, 30), width=10)
    draw.ellipse((96, 116, 352, 372), fill=(250, 246, 234), outline=(120, 96, 40), width=4)
    for hour in range(12):
        angle = math.radians(hour * 30)
        x, y = 224 + 110 * math.sin(angle), 244 - 110 * math.cos(angle)
        draw.ellipse((x - 6, y - 6, x + 6, y + 6), fill=(40, 40, 40))
    draw.line((224, 244, 224 + 60, 244 - 20), fill=(20, 20, 20), width=7)  # twenty past four
    draw.line((224, 244, 224 + 20, 244 + 80), fill=(20, 20, 20), width=5)
    draw.rectangle((204, 40, 244, 88), fill=(196, 160, 72), outline=(90, 70, 30), width=6)
    image.save(path)
    return path


async def chat_phase(
    home: Path, picture: Path, max_turns: int
) -> tuple[list[TurnRow], dict[str, object]]:
    os.environ["KOTONIA_HOME"] = str(home)
    from kotonia_tui.chat.bootstrap import open_service
    from kotonia_tui.chat.events import FoldProgress
    from kotonia_tui.config import load_settings

    settings = load_settings()
    service = open_service(settings)
    await service.start()
    landed: list[FoldProgress] = []
    service.subscribe(
        lambda e: landed.append(e) if isinstance(e, FoldProgress) and e.state == "landed" else None
    )
    rows: list[TurnRow] = []
    facts: dict[str, object] = {"load_ms": service.engine.info.load_ms}
    try:
        conv = service.new_conversation(service.library.get(CARD))
        digest = service.attach_image(picture)

        async def turn(number: int, text: str, images: list[str], note: str) -> Any:
            sent = await service.send(conv.id, text, images)
            done = await sent.wait()
            if done.error is not None or done.metrics is None:
                raise SystemExit(f"gpu-check: turn {number} failed: {done.error}")
            m = done.metrics
            if sent.prepared.plan.apply_landed:
                note = f"{note}, fold applied".lstrip(", ")
            rows.append(
                TurnRow(
                    number,
                    m.prompt_positions,
                    m.reused,
                    m.evaluated,
                    m.prompt_ms,
                    m.generated,
                    m.tokens_per_s,
                    m.images,
                    note,
                )
            )
            if number == 1:
                facts["first_reply"] = done.reply.text if done.reply else ""
            return sent

        for index in range(max_turns):
            first = index == 0
            sent = await turn(
                index + 1,
                LINES[index % len(LINES)],
                [digest] if first else [],
                "cold, picture attached" if first else "",
            )
            if sent.prepared.queued is not None:
                rows[-1].note = f"{rows[-1].note}, fold queued".lstrip(", ")
                break
        else:
            raise SystemExit(f"gpu-check: no fold was queued in {max_turns} turns")
        started = time.monotonic()
        await service.worker.wait_settled(conv.id)
        facts["fold_s"] = time.monotonic() - started
        while service.engine.busy:  # the prewarm of the folded prompt, in the background
            await asyncio.sleep(0.05)
        facts["fold_and_prewarm_s"] = time.monotonic() - started
        chapters = service.store.chapters(conv.id)
        facts["chapters"] = len(chapters)
        facts["chapter"] = chapters[0].text if chapters else ""
        facts["fold_failed"] = [
            j.last_error for j in service.store.fold_jobs(conv.id) if j.last_error
        ]
        number = len(rows)
        await turn(number + 1, "And then? What do you see inside?", [], "")
        await turn(number + 2, "Thank you, Rowan. Good night.", [], "")
    finally:
        await service.close()
    return rows, facts


def eval_phase(home: Path, args: argparse.Namespace, out_json: Path) -> tuple[str, float, int]:
    argv = ["eval"]
    if args.eval_source:
        argv.append(args.eval_source)
    argv += [
        "--n-ctx",
        str(args.eval_n_ctx),
        "--questions",
        str(args.questions),
        "--seed",
        "1",
        "--json",
        str(out_json),
        "--quiet",
    ]
    started = time.monotonic()
    proc = kotonia(home, *argv, timeout=3600)
    elapsed = time.monotonic() - started
    text = proc.stdout if proc.returncode == 0 else proc.stdout + proc.stderr
    return text.rstrip(), elapsed, proc.returncode


def without_plot(lines: list[str]) -> list[str]:
    """The eval's text without its terminal plot (its figures are in the table above it)."""
    kept: list[str] = []
    plotting = False
    for line in lines:
        if "│" in line and not plotting:
            plotting = True
        if not plotting:
            kept.append(line)
        elif "G=generational" in line:
            plotting = False
    return kept


def fmt_ms(value: float) -> str:
    return f"{value:,.1f}"


def report(
    args: argparse.Namespace,
    model: Path,
    mmproj: Path,
    doctor: str,
    rows: list[TurnRow],
    facts: dict[str, object],
    eval_text: str,
    phases: dict[str, float],
) -> str:
    import llama_cpp

    lines = [f"==== kotonia gpu-check: {PROFILE} ===="]
    for label, path in (("model", model), ("mmproj", mmproj)):
        lines.append(f"{label:<8}{path} ({path.stat().st_size / 1e9:.2f} GB)")
    gpu = "yes" if llama_cpp.llama_supports_gpu_offload() else "no (CPU build)"
    lines.append(
        f"llama-cpp-python {llama_cpp.__version__}, GPU offload {gpu}, "
        f"load {float(facts['load_ms']):,.0f} ms"
    )
    lines += [
        f"  doctor: {line}"
        for line in doctor.splitlines()
        if line.split()[:1] in (["GPU"], ["loaded"], ["trained"], ["chat"], ["threads"])
    ]
    lines.append(
        f"chat with {CARD}: n_ctx {args.chat_n_ctx}, reply cap {args.reply_tokens}, "
        f"fold trigger {args.fold_trigger:.0%} of the window"
    )
    lines.append(" turn  cells  reused  evaluated  prompt ms  generated  tokens/s  images  note")
    for r in rows:
        lines.append(
            f" {r.number:>4}  {r.cells:>5}  {r.reused:>6}  {r.evaluated:>9}  "
            f"{fmt_ms(r.prompt_ms):>9}  {r.generated:>9}  {r.tokens_per_s:>8.1f}  {r.images:>6}  "
            f"{r.note}"
        )
    cold = rows[0]
    warm = [r for r in rows[1:] if "fold applied" not in r.note]
    lines.append(
        f"prompt ms: cold {fmt_ms(cold.prompt_ms)} ({cold.evaluated} cells evaluated); warm "
        f"median {fmt_ms(statistics.median(r.prompt_ms for r in warm))} over {len(warm)} turns "
        f"(median {statistics.median(r.evaluated for r in warm):.0f} evaluated)"
    )
    speeds = [r.tokens_per_s for r in rows if r.generated]
    if speeds:
        lines.append(f"generation: median {statistics.median(speeds):.1f} tokens/s")
    applied = next((r for r in rows if "fold applied" in r.note), None)
    chapter = str(facts.get("chapter", ""))
    lines.append(
        f"fold: {facts.get('chapters', 0)} chapter(s) landed {float(facts.get('fold_s', 0)):.1f} s "
        f"after the turn that queued it (prewarm done at "
        f"{float(facts.get('fold_and_prewarm_s', 0)):.1f} s)"
    )
    if chapter:
        lines.append(f"  chapter: {chapter[:200]!r}{'…' if len(chapter) > 200 else ''}")
    for error in facts.get("fold_failed", []) or []:  # type: ignore[union-attr]
        lines.append(f"  fold error: {error}")
    if applied is not None:
        lines.append(
            f"  applying turn {applied.number}: {applied.evaluated} of {applied.cells} cells "
            f"evaluated, {fmt_ms(applied.prompt_ms)} ms"
        )
    first = str(facts.get("first_reply", ""))
    lines.append(f"first reply (to the picture): {first[:240]!r}{'…' if len(first) > 240 else ''}")
    source = args.eval_source or "the shipped dataset (assets/eval/lighthouse.json)"
    lines.append(
        f"eval on {source}: n_ctx {args.eval_n_ctx}, {args.questions} questions per range, "
        f"{phases['eval']:.0f} s"
    )
    lines += [f"  {line}" for line in without_plot(eval_text.splitlines())]
    total = sum(phases.values())
    spent = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in phases.items())
    verdict = "within" if total <= BUDGET_S else "OVER"
    lines.append(f"time: {spent}; total {total:.0f} s ({verdict} the {BUDGET_S} s budget)")
    lines.append("==== end ====")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    phases = {"build": args.build_seconds}
    home = args.home or Path(tempfile.mkdtemp(prefix="kotonia-gpu-check-"))
    if args.stand_ins is not None:
        model, mmproj = write_stand_ins(args.stand_ins)
    else:
        model, mmproj = args.model.expanduser().resolve(), args.mmproj.expanduser().resolve()
    for path in (model, mmproj):
        if not path.is_file():
            print(f"gpu-check: {path}: no such file", file=sys.stderr)
            return 1
    write_config(home, args, model, mmproj)
    print(f"gpu-check: KOTONIA_HOME={home}", file=sys.stderr)

    started = time.monotonic()
    print("gpu-check: loading the model (kotonia doctor --load) ...", file=sys.stderr)
    doctor = kotonia(home, "doctor", "--load", timeout=600)
    phases["load check"] = time.monotonic() - started
    if doctor.returncode != 0:
        print(doctor.stdout + doctor.stderr, file=sys.stderr)
        return 1

    started = time.monotonic()
    print("gpu-check: the scripted chat (picture, fold) ...", file=sys.stderr)
    picture = draw_watch(home / "watch.png")
    rows, facts = asyncio.run(chat_phase(home, picture, args.max_turns))
    phases["chat"] = time.monotonic() - started

    print("gpu-check: kotonia eval ...", file=sys.stderr)
    eval_text, eval_s, eval_code = eval_phase(home, args, home / "eval.json")
    phases["eval"] = eval_s
    print(report(args, model, mmproj, doctor.stdout, rows, facts, eval_text, phases))
    return 0 if eval_code == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
