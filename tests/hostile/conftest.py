"""Hostile-input fixtures: a small card in the user's folder, a tiny model, a seeded store."""

from __future__ import annotations

from pathlib import Path

import pytest

from kotonia_tui.config import app_dirs
from tests.cards import SHORT_CARD_KEY, write_short_card


@pytest.fixture
def card() -> str:
    return write_short_card()


@pytest.fixture
def tiny_env(tiny_model_path: Path) -> dict[str, str]:
    """Point `kotonia` at the tiny model (its own template; a small window)."""
    return {"KOTONIA_MODEL_PATH": str(tiny_model_path), "KOTONIA_N_CTX": "2048"}


@pytest.fixture
def short_reply_model(scripted_model) -> Path:
    """A tiny model whose reply is always one short line: a turn that stores a reply, fast
    (a model that ends at once stores nothing: the app says "no reply")."""
    return scripted_model("The lamp is lit.")


@pytest.fixture
def db() -> Path:
    return app_dirs().default_db


__all__ = ["SHORT_CARD_KEY"]
