"""Reliability fixtures: a small card, settings on tiny real models, config files, services.

The app is attacked for real: subprocesses killed with SIGKILL, real SQLite files, real GGUF
models written by tests/tiny_models.py. Nothing here is mocked.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from kotonia_tui.chat.bootstrap import open_service
from kotonia_tui.chat.service import ChatService
from kotonia_tui.config import Settings, app_dirs
from tests.cards import SHORT_CARD_KEY, write_short_card
from tests.history import seed_conversation
from tests.settings import fake_settings, tiny_settings, tiny_values

__all__ = ["seed_conversation"]

CARD_KEY = SHORT_CARD_KEY
CHAPTER = "Ann visited Wren at the lighthouse and they talked about the storm lamps."
# A chronicler that keeps nothing: under the grammar its words land in the chapter's strings,
# and a bare list of words says nothing (memory/structured.py `says_something`), so every item is
# dropped and the chapter is never stored.
# What a scripted chronicler writes for a conversation of `seed_conversation` ("Line N about the
# lamps."): a chapter's items must rest on the messages they cite, and CHAPTER's do not.
SEEDED_CHAPTER = "Line after line about the lamps."
HOLLOW_CHAPTER = "Harwick, Street, Corwin, Lamps, Storm, Tower, Key"


def write_card() -> str:
    """A small card in the user's folder (the tiny tokenizer makes long setups expensive)."""
    return write_short_card()


# Smaller than the other tests' defaults: the reliability tests run subprocesses side by side.
# (The engines' threads are the suite's own, tests/settings.py `engine_threads`.)
RELIABILITY_DEFAULTS: dict[str, Any] = {"n_ctx": 2048}


def profile_values(**values: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    return tiny_values(**{**RELIABILITY_DEFAULTS, **values})


def settings_on(model: Path, **values: Any) -> Settings:
    """Settings with one profile on a tiny model; `values` go to the profile or the settings."""
    return tiny_settings(model, **{**RELIABILITY_DEFAULTS, **values})


def fake_settings_on(**values: Any) -> Settings:
    """The same settings for the fake engine (tests/fake_engine.py)."""
    return fake_settings(**{**RELIABILITY_DEFAULTS, **values})


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))  # a TOML basic string


def write_config(model: Path, **values: Any) -> Path:
    """The same settings as a config.toml in KOTONIA_HOME, for a `kotonia` subprocess."""
    profile, rest = profile_values(**values)
    lines = ['profile = "tiny"'] + [f"{k} = {_toml(v)}" for k, v in rest.items()]
    lines += ["", "[profiles.tiny]", f"model_path = {_toml(model)}"]
    lines += [f"{k} = {_toml(v)}" for k, v in profile.items()]
    path = app_dirs().config_file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def db_path() -> Path:
    return app_dirs().default_db


ServiceFactory = Callable[..., Any]


@pytest.fixture
async def make_service() -> AsyncIterator[ServiceFactory]:
    """Open (and start) chat services; all are closed at the end of the test."""
    opened: list[ChatService] = []

    async def make(settings: Settings, db: Path | None = None, start: bool = True) -> ChatService:
        service = open_service(settings, db=db)
        if start:
            await service.start()
        opened.append(service)
        return service

    yield make
    for service in opened:
        with contextlib.suppress(Exception):  # a test may have broken it on purpose
            await service.close()
