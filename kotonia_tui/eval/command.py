"""`kotonia eval`: arguments, loading the input and the model, writing the outputs.

    kotonia eval [SOURCE] [--model PATH] [--n-ctx N] [--questions N] [--runs K]
                 [--arms generational,rolling,truncation,full,generational+recall,...]
                 [--evidence-only] [--json OUT] [--plot OUT.png]

SOURCE is a dataset file, a LoCoMo or LongMemEval file in its published layout (`--sample`,
`--character-speaker`, `--skip-bad-evidence`), a SillyTavern `.jsonl` / JSON list chat, or a
stored conversation id; without it, the shipped dataset (`assets/eval/lighthouse.json`).
What the loader chose or left out is printed as `note:` lines on standard error, even with
`--quiet`, and kept in the report's `input.notes`. The table, the terminal plot
and the audit go to standard output, progress to standard error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from kotonia_tui.characters import CharacterCard
from kotonia_tui.chat.bootstrap import open_engine, open_library, open_store
from kotonia_tui.config import ConfigError, Settings, app_dirs, load_settings
from kotonia_tui.engine import Engine, EngineInfo, ServerInfo
from kotonia_tui.eval.dataset import DatasetError, EvalConversation, load_file, load_stored
from kotonia_tui.eval.harness import EvalOptions, run_eval
from kotonia_tui.eval.pinning import file_sha256
from kotonia_tui.eval.plot_png import write_png
from kotonia_tui.eval.published import PublishedChoice
from kotonia_tui.eval.report import audit_text, table, terminal_plot
from kotonia_tui.eval.results import EvalReport, ModelPin
from kotonia_tui.terminal_text import visible

SHIPPED_DATASET = Path(__file__).resolve().parents[2] / "assets" / "eval" / "lighthouse.json"


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected NAME=VALUE")
        try:
            overrides[name.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[name.strip()] = value
    for name, value in (
        ("model_path", args.model),
        ("n_ctx", args.n_ctx),
        ("threads", args.threads),
        ("prompt_format", args.prompt_format),
    ):
        if value is not None:
            overrides[name] = value
    settings = load_settings(**overrides)
    if args.seed is not None:
        profile = settings.active_profile().model_copy(update={"seed": args.seed})
        settings = load_settings(
            **overrides, profiles={**settings.profiles, settings.profile: profile}
        )
    return settings


def _input(
    args: argparse.Namespace, settings: Settings
) -> tuple[EvalConversation, CharacterCard | None]:
    source = args.source
    choice = PublishedChoice(
        sample=getattr(args, "sample", None),
        character_speaker=getattr(args, "character_speaker", None),
        skip_bad_evidence=bool(getattr(args, "skip_bad_evidence", False)),
    )
    if source is None:
        conv = load_file(SHIPPED_DATASET, settings.persona.name, choice)
    elif source.isdigit() and not Path(source).exists():
        if choice.given:
            raise DatasetError(
                "--sample, --character-speaker and --skip-bad-evidence apply to a LoCoMo or "
                "LongMemEval file, not to a stored conversation"
            )
        with open_store(settings, getattr(args, "db", None)) as store:
            conv = load_stored(store, int(source))
    else:
        conv = load_file(Path(source), settings.persona.name, choice)
    for note in conv.notes:
        # What was chosen or left out: said even with --quiet, so nothing is silent.
        print(visible(f"note: {note}", one_line=True), file=sys.stderr, flush=True)
    card = None
    wanted = args.character or conv.character.key
    if wanted:
        library = open_library(settings)
        try:
            card = library.find(wanted) if args.character else library.get(wanted)
        except LookupError:
            if args.character:
                raise
            card = None  # a stored conversation whose card is gone: play it by name
    return conv, card


def model_pin(engine: Engine) -> ModelPin:
    """What was evaluated: the model file by hash (cached by path, size, mtime) and its setup."""
    info = engine.info
    pin = ModelPin(
        key=engine.model_key,
        n_ctx=engine.n_ctx,
        prompt_format=str(engine.profile.prompt_format.value),
        backend=engine.profile.backend,
    )
    if not isinstance(info, EngineInfo):
        # A server backend: the file is the server's; its model id is all there is to pin.
        model_id = info.model_id if isinstance(info, ServerInfo) else info.model_name
        return replace(pin, model_id=model_id)
    path = info.model_path
    stat = path.stat()
    return replace(
        pin,
        path=str(path),
        name=info.model_name,
        sha256=file_sha256(path, app_dirs().cache),
        bytes=stat.st_size,
        mtime_ns=stat.st_mtime_ns,
        fold_n_ctx=info.fold_n_ctx,
        n_ctx_train_reported=info.n_ctx_train,
        threads=info.threads,
        gpu_offload=info.gpu_offload,
        llama_cpp_version=info.llama_cpp_version,
    )


async def _run(args: argparse.Namespace, settings: Settings) -> EvalReport:
    def progress(text: str) -> None:
        if not args.quiet:
            line = f"[{time.monotonic() - began:6.1f}s] {visible(text, one_line=True)}"
            print(line, file=sys.stderr, flush=True)

    began = time.monotonic()
    conv, card = _input(args, settings)
    arms = tuple(a.strip() for a in args.arms.split(",") if a.strip())
    try:
        options = EvalOptions(
            questions_per_range=args.questions,
            runs=args.runs,
            arms=arms,
            answer_max_tokens=args.answer_tokens,
            full_max_ctx=args.full_max_ctx,
            evidence_only=args.evidence_only,
            block_variants=tuple(
                v.strip() for v in (args.block_variants or "").split(",") if v.strip()
            ),
            replay_cache=args.replay_cache,
        )
    except ValueError as exc:
        raise DatasetError(str(exc)) from exc
    profile = settings.active_profile()
    progress(f"loading the model (n_ctx {profile.n_ctx})")
    engine = await asyncio.to_thread(open_engine, settings)

    async def bigger(n_ctx: int) -> Engine:
        # The same model and settings, only a wider window (the full arm's upper bound).
        progress(f"loading the model again with n_ctx {n_ctx} for the full arm")
        return await asyncio.to_thread(open_engine, settings.model_copy(update={"n_ctx": n_ctx}))

    reload_allowed = args.full_max_ctx > 0 and profile.backend == "inprocess"
    try:
        pin = await asyncio.to_thread(model_pin, engine)
        report = await run_eval(
            conv,
            settings,
            engine,
            options,
            open_bigger=bigger if reload_allowed else None,
            progress=progress,
            card=card,
        )
    finally:
        engine.close()
    report.model = pin
    # The command line as typed, when this process is the `kotonia eval` command itself.
    report.command = sys.argv[1:] if sys.argv[1:2] == ["eval"] else []
    report.wall_seconds = round(time.monotonic() - began, 2)
    return report


def run_command(args: argparse.Namespace, settings: Settings | None = None) -> int:
    """The `eval` subcommand. `settings` from the CLI are rebuilt with this run's overrides."""
    try:
        run_settings = _settings(args)
        report = asyncio.run(_run(args, run_settings))
    except DatasetError as exc:
        print(visible(f"error: {exc}"), file=sys.stderr)
        return 1
    # The audit quotes the model and the dataset: shown, never obeyed, on the terminal.
    print(visible(table(report)))
    print()
    print(terminal_plot(report))
    print()
    print(visible(audit_text(report)))
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(
            json.dumps(report.to_json(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
        )
        print(f"wrote {args.json_out}", file=sys.stderr)
    if args.plot:
        write_png(report, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    print(f"took {report.wall_seconds or report.seconds:.1f} s", file=sys.stderr)
    return 0
