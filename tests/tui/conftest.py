"""Fixtures for the TUI tests: a small card in the user's folder, settings on tiny models, and
the app on the fake engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kotonia_tui.config import app_dirs
from tests.characters.builders import v2_card
from tests.fake_engine import open_fake_service, scripted
from tests.settings import engine_threads

MIRA_GREETING = '*Mira sets down her lantern.* "You made it through the storm, {{user}}."'
MIRA_ALTERNATE = "*The lighthouse door creaks open.* `Another visitor, at this hour?`"


@pytest.fixture
def mira_card(kotonia_home: Path) -> Path:
    """A small card (its setup fits the tiny model's window) in the user's card folder."""
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    card = v2_card(
        "Mira",
        description="Mira keeps the lighthouse on a stormy northern coast.",
        first_mes=MIRA_GREETING,
        alternate_greetings=[MIRA_ALTERNATE],
        creator_notes="A small test card.",
    )
    path = folder / "mira.json"
    path.write_text(json.dumps(card), encoding="utf-8")
    return path


def tiny_settings(model: Path, *, reply_max_tokens: int = 256, n_ctx: int = 2048, **extra: Any):
    """Settings on a tiny model through a named profile (so the reply cap can be set too)."""
    from kotonia_tui.config import ModelProfile, PromptFormat, load_settings

    profile = ModelProfile(
        model_path=model,
        mmproj_path=extra.pop("mmproj_path", None),
        n_ctx=n_ctx,
        prompt_format=PromptFormat.TEMPLATE,
        reply_max_tokens=reply_max_tokens,
        temperature=0.8,
        seed=1234,
        threads=engine_threads(),
    )
    extra.setdefault("fold_delay_s", 0)
    return load_settings(profile="tiny", profiles={"tiny": profile}, **extra)


@pytest.fixture
def on_the_fake_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The app's service on the fake engine (tests/fake_engine.py: no model file, instant),
    which answers "Hm."; for an app made with `tests.settings.fake_settings()`."""

    def open_service(settings, *, db=None, progress=None):
        return open_fake_service(settings, scripted("Hm."), db=db)

    monkeypatch.setattr("kotonia_tui.tui.app.open_service", open_service)
