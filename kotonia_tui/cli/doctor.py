"""`kotonia doctor`: paths, settings, model files, the database, the cards and, with `--load`,
the model itself, one line each; problems on standard error."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from kotonia_tui import __version__
from kotonia_tui.chat.bootstrap import (
    open_engine,
    open_library,
    open_store,
    state_cache_config,
)
from kotonia_tui.chat.semantic import open_embedding_model
from kotonia_tui.chat.setup_room import squeezed_cards
from kotonia_tui.cli.output import plural, progress, say
from kotonia_tui.config import Settings, app_dirs
from kotonia_tui.engine import EngineError, EngineInfo, gpu_offload_supported, llama_cpp_version
from kotonia_tui.engine.default_embedding import MODEL_NAME, check_shipped, converted_embedding
from kotonia_tui.engine.default_model import default_model_state, models_folder
from kotonia_tui.engine.embedding_key import embedding_key, header_dimension
from kotonia_tui.engine.model_files import check_gguf
from kotonia_tui.engine.server.credentials import redact_url
from kotonia_tui.engine.state_cache import StateCacheConfig, usage
from kotonia_tui.memory.budgets import Budgets, recall_takes_room
from kotonia_tui.store import SCHEMA_VERSION, Store, StoreError


def run_doctor(args: argparse.Namespace, settings: Settings) -> int:
    dirs = app_dirs()
    profile = settings.active_profile()
    rows: list[tuple[str, str]] = [
        ("kotonia-tui", __version__),
        ("python", platform.python_version()),
        ("llama-cpp-python", llama_cpp_version()),
        ("config file", f"{dirs.config_file} ({'found' if dirs.config_file.exists() else 'none'})"),
        ("data dir", str(dirs.data)),
        ("cache dir", str(dirs.cache)),
        ("profile", f"{settings.profile}: {profile.description or '(custom)'}"),
        ("backend", profile.backend),
        ("prompt format", profile.prompt_format.value),
        ("n_ctx", str(profile.n_ctx)),
        ("reply reserve", f"{profile.reply_max_tokens} tokens"),
        ("thinking", "on" if profile.thinking else "off"),
        ("GPU offload", _gpu_line(profile.n_gpu_layers)),
    ]
    problems: list[str] = []
    states = state_cache_config(settings, dirs)
    rows.append(("saved KV states", _states_line(states)))
    if profile.backend == "server":
        rows.extend(_server_rows(profile, problems, states))
    elif profile.model_path is None:
        try:
            rows.append(("model", f"embedded default: {default_model_state(dirs.cache)}"))
        except EngineError as exc:
            problems.append(str(exc))
            rows.append(("model", "embedded default (problem)"))
    else:
        rows.append(("model", _file_line(profile.model_path, "model", problems)))
    if profile.backend == "server":
        pass  # images: the server's projector (shown above)
    elif profile.mmproj_path is not None:
        rows.append(("mmproj", _file_line(profile.mmproj_path, "mmproj", problems)))
    else:
        rows.append(("mmproj", "none (no image input)"))
    before = len(problems)
    embedding = _embedding_rows(settings, dirs.cache, rows, problems)
    embedding_usable = settings.semantic_recall and len(problems) == before
    # Recall is by meaning too only where the model reads and sqlite-vec loads (the store says).
    semantic = False
    db_path = settings.db_path(dirs) if args.db is None else args.db
    try:
        with open_store(settings, args.db, read_only=args.read_only) as store:
            rows.append(("database", f"{db_path} (schema {store.schema_version})"))
            rows.append(("conversations", str(len(store.list_conversations()))))
            if embedding_usable:
                unavailable = store.vector_search_unavailable()
                sqlite_vec = "available" if unavailable is None else f"unavailable: {unavailable}"
                rows.append(("sqlite-vec", sqlite_vec))
                if embedding is not None:  # the shipped model before its first use: no file
                    rows.append(_vector_row(store, *embedding))
                semantic = unavailable is None
    except StoreError as exc:
        problems.append(str(exc))
        rows.append(
            ("database", f"{db_path} (cannot open; this app knows schema {SCHEMA_VERSION})")
        )
    rows.append(("recall", _recall_line(settings, profile.n_ctx, semantic)))
    library = open_library(settings)
    rows.append(("character folders", ", ".join(str(f) for f in library.folders)))
    rows.append(("characters", f"{len(library.cards)} cards, {len(library.errors)} broken"))
    problems.extend(str(p) for p in library.errors)
    if args.load and not problems and profile.backend != "server":
        engine = open_engine(settings, progress(sys.stderr))
        try:
            info = engine.info
            rows.append(("loaded", f"{info.model_name} in {info.load_ms:.0f} ms"))
            rows.append(("trained context", str(info.n_ctx_train)))
            rows.append(("chat template", "yes" if info.has_chat_template else "no"))
            if isinstance(info, EngineInfo):
                rows.append(("threads", str(info.threads)))
            rows.extend(squeezed_cards(engine, settings, library))
        finally:
            engine.close()
        if embedding_usable:
            rows.append(("embedding loaded", _load_embedding(settings)))
    elif not args.load and profile.backend != "server":
        rows.append(("card setups", "checked against the window with --load"))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        say(f"{name.ljust(width)}  {value}", one_line=True)
    for problem in problems:
        say(f"problem: {problem}", stream=sys.stderr)
    if profile.backend == "inprocess":
        for line in _how_to_get_files(settings.profile, profile, dirs.config_file):
            say(line, stream=sys.stderr)
    return 1 if problems else 0


def _how_to_get_files(name: str, profile: Any, config_file: Path) -> list[str]:
    """What to download and where to put it, when the profile's model files are missing."""
    files = [p for p in (profile.model_path, profile.mmproj_path) if p is not None]
    missing = [p for p in files if not p.exists()]
    if not missing:
        return []
    lines = [f"to use the profile {name!r}, download {' and '.join(p.name for p in missing)}"]
    if profile.download:
        lines.append(f"  from {profile.download}")
    folders = sorted({str(p.parent) for p in missing})
    lines += [
        f"and put them in {' and '.join(folders)}, or write where they are in {config_file}:",
        f"  profile = {json.dumps(name)}",
        "",
        f"  [profiles.{json.dumps(name)}]",
    ]
    keys = (("model_path", profile.model_path), ("mmproj_path", profile.mmproj_path))
    lines += [f"  {key} = {json.dumps(str(path))}" for key, path in keys if path is not None]
    lines.append("(KOTONIA_MODEL_PATH and KOTONIA_MMPROJ_PATH set them for one run)")
    return lines


def _embedding_rows(
    settings: Settings, cache_dir: Path, rows: list[tuple[str, str]], problems: list[str]
) -> tuple[Path, int] | None:
    """The embedding model semantic recall uses, in a row: off, or its file and dimension
    (returned, to count its vectors; None before the shipped model's first use)."""
    path = settings.active_profile().embedding_model_path
    if not settings.semantic_recall:
        unused = f"; embedding_model_path {path} is not used" if path is not None else ""
        rows.append(("embedding model", f"none (semantic_recall = false{unused}): recall by words"))
        return None
    if path is None:
        converted = converted_embedding(cache_dir)
        if converted is None:
            try:
                check_shipped()  # the files the first use will read: the published ones?
            except EngineError as exc:
                problems.append(str(exc))
                rows.append(
                    ("embedding model", f"{MODEL_NAME}, shipped (problem: recall by words)")
                )
                return None
            where = models_folder(cache_dir)
            rows.append(
                ("embedding model", f"{MODEL_NAME} (shipped): converted on first use into {where}")
            )
            return None
        path = converted
    try:
        dimension = header_dimension(path)
    except EngineError as exc:
        problems.append(str(exc))
        rows.append(("embedding model", f"{path} (problem: recall by words only)"))
        return None
    size = path.stat().st_size / 1e6
    rows.append(("embedding model", f"{path} ({size:,.0f} MB, dimension {dimension})"))
    return None if dimension is None else (path, dimension)


def _recall_line(settings: Settings, n_ctx: int, semantic: bool) -> str:
    """What a turn may recall from the archive: its share of the window, by what, and whether
    it also takes the room a short window leaves after a fold."""
    if settings.recall_budget_ratio <= 0:
        return "off (recall_budget_ratio is 0)"
    share = int(n_ctx * settings.recall_budget_ratio)
    cap = settings.recall_max_tokens
    size = (
        f"{cap:,} tokens (recall_max_tokens; {settings.recall_budget_ratio:.0%} of the window "
        f"would be {share:,})"
        if 0 < cap < share
        else f"{settings.recall_budget_ratio:.0%} of the window ({share:,} tokens)"
    )
    line = f"{size} a turn, by " + ("words and meaning" if semantic else "words")
    why = (
        "recall_free_room = true"
        if settings.recall_free_room is not None
        else "recall_free_room unset: on with recall by meaning"
    )
    if recall_takes_room(settings.recall_free_room, semantic):
        # What the turn's own arithmetic allows (`Budgets.recall_with_room`), at its most:
        # right after a fold into an empty window.
        budgets = Budgets.for_window(n_ctx, 0, settings)
        per_turn = budgets.recall
        more = budgets.recall_with_room(per_turn, 0) - per_turn
        if more <= 0:
            return f"{line} (recall_max_tokens leaves no more for the room after a fold)"
        again = "as much again" if more == per_turn else f"{more:,} tokens more (recall_max_tokens)"
        return f"{line}, and the room a short window leaves after a fold, up to {again} ({why})"
    return line


def _vector_row(store: Store, path: Path, dimension: int) -> tuple[str, str]:
    """How many messages have a vector for this model, and how many wait for one."""
    counts = store.vector_counts(embedding_key(path, dimension))
    return ("vectors", f"{counts.stored:,} stored, {counts.pending:,} pending for this model")


def _load_embedding(settings: Settings) -> str:
    embedder, _path, problem = open_embedding_model(settings, progress(sys.stderr))
    if embedder is None:
        return f"no: {problem}"
    try:
        return f"yes, dimension {embedder.dimension}, in {embedder.load_ms:.0f} ms"
    finally:
        embedder.close()


def _states_line(states: StateCacheConfig) -> str:
    """Where the saved KV states are, how much room they take, and the cap."""
    if states.cap_bytes <= 0:
        return "off (state_cache_mb = 0): every start re-reads the whole prompt"
    used = usage(states.folder)
    return (
        f"{states.folder} ({plural(used.files, 'file')}, {used.bytes / 1e6:,.0f} MB of "
        f"{states.cap_bytes >> 20:,} MB; least recently used go first)"
    )


def _server_rows(
    profile: Any, problems: list[str], states: StateCacheConfig
) -> list[tuple[str, str]]:
    """The server backend: where it is, whether it answers, and what it reports."""
    from kotonia_tui.engine.server import ServerEngine

    key = "set" if os.environ.get(profile.api_key_env) else "not set (no key sent)"
    server = redact_url(profile.server_url) if profile.server_url else None
    rows = [
        ("server", server or "(none: set server_url)"),
        ("api key", f"${profile.api_key_env} {key}"),
    ]
    try:
        engine = ServerEngine.open(profile, states=states)
    except EngineError as exc:
        problems.append(str(exc))
        rows.append(("server answers", "no"))
        return rows
    try:
        info = engine.info
        rows.append(("server answers", f"yes, in {info.load_ms:.0f} ms ({info.kind})"))
        rows.append(("model", info.model_id))
        rows.append(("server n_ctx", f"{info.n_ctx} (from the {info.n_ctx_source})"))
        path = "rendered here, /v1/completions" if info.client_renders else "/v1/chat/completions"
        rows.append(("prompt", path))
        rows.append(("token counts", info.tokenizer))
        rows.append(("images", "yes" if engine.has_vision else "no"))
        rows.append(("read timeout", f"{info.read_timeout_s:.0f} s"))
        support = engine.slot_support
        rows.append(("slot save/restore", f"{'yes' if support.available else 'no'}: {support.why}"))
        for warning in info.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    finally:
        engine.close()
    return rows


def _gpu_line(n_gpu_layers: int | None) -> str:
    supported = gpu_offload_supported()
    if n_gpu_layers is None:
        return f"{'all layers' if supported else 'none'} ({'GPU' if supported else 'CPU'} build)"
    return f"{n_gpu_layers} layers ({'GPU' if supported else 'CPU'} build)"


def _file_line(path: Path, what: str, problems: list[str]) -> str:
    try:
        check_gguf(path, what)
    except EngineError as exc:
        problems.append(str(exc))
        return f"{path} (problem)"
    return f"{path} ({path.stat().st_size / 1e9:.2f} GB)"
