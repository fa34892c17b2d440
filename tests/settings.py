"""Settings for the tests and the benchmarks: a tiny test model, or the embedded default."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kotonia_tui.config import ModelProfile, PromptFormat, Settings, load_settings
from kotonia_tui.engine.threads import usable_cores


def engine_threads() -> int:
    """The llama.cpp threads of every engine a test opens: the cores this process may use,
    shared among the pytest-xdist workers (`make test` runs one per core, so one thread each:
    two workers with two threads each would make four on two cores). tests/conftest.py puts it
    in KOTONIA_THREADS, which the app's settings read (in-process and in `kotonia`
    subprocesses); a test that builds a ModelProfile by hand passes it as `threads`."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, usable_cores() // max(1, workers))


def _split(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`values` that belong to the model profile, and the rest (app settings)."""
    fields = set(ModelProfile.model_fields)
    return (
        {k: v for k, v in values.items() if k in fields},
        {k: v for k, v in values.items() if k not in fields},
    )


def tiny_values(**values: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The profile fields and the app settings for a tiny model, with the tests' defaults."""
    profile, rest = _split(values)
    profile.setdefault("n_ctx", 8192)
    profile.setdefault("temperature", 0.0)
    profile.setdefault("reply_max_tokens", 32)
    profile.setdefault("prompt_format", PromptFormat.TEMPLATE)
    profile.setdefault("threads", engine_threads())
    profile.setdefault("seed", 7)
    rest.setdefault("fold_delay_s", 0.0)
    # On where the test names an embedding model (tests/conftest.py turns it off otherwise).
    rest.setdefault("semantic_recall", profile.get("embedding_model_path") is not None)
    return profile, rest


def tiny_settings(model: Path, *, mmproj: Path | None = None, **values: Any) -> Settings:
    """Settings with one profile on a tiny model; `values` go to the profile or the settings."""
    profile, rest = tiny_values(**values)
    tiny = ModelProfile(model_path=model, mmproj_path=mmproj, **profile)
    return load_settings(profile="tiny", profiles={"tiny": tiny}, **rest)


def fake_settings(**values: Any) -> Settings:
    """Settings for the fake engine (tests/fake_engine.py): the tiny models' defaults, and no
    model file (the fake opens none)."""
    profile, rest = tiny_values(**values)
    fake = ModelProfile(**profile)
    return load_settings(profile="fake", profiles={"fake": fake}, **rest)


def default_model_settings(**values: Any) -> Settings:
    """The embedded default model (its shipped profile) with greedy sampling and `values`."""
    profile, rest = _split(values)
    profile.setdefault("temperature", 0.0)
    profile.setdefault("seed", 7)
    profile.setdefault("threads", engine_threads())
    profile.setdefault("n_ctx", 2048)
    profile.setdefault("reply_max_tokens", 40)
    shipped = load_settings().all_profiles()["default"]
    rest.setdefault("fold_delay_s", 0.0)
    rest.setdefault("semantic_recall", profile.get("embedding_model_path") is not None)
    return load_settings(
        profile="gemma", profiles={"gemma": shipped.model_copy(update=profile)}, **rest
    )
