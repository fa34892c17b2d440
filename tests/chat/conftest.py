"""Chat-service fixtures: a real store file, the shipped cards and a tiny real model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from kotonia_tui.chat.bootstrap import open_service
from kotonia_tui.chat.service import ChatService
from kotonia_tui.config import ModelProfile, PromptFormat, Settings, load_settings


def tiny_settings(model: Path, *, mmproj: Path | None = None, **values: Any) -> Settings:
    """Settings with one profile on a tiny model; `values` go to the profile or the settings."""
    profile_fields = set(ModelProfile.model_fields)
    profile = {k: v for k, v in values.items() if k in profile_fields}
    rest = {k: v for k, v in values.items() if k not in profile_fields}
    profile.setdefault("n_ctx", 8192)
    profile.setdefault("temperature", 0.0)
    profile.setdefault("reply_max_tokens", 32)
    profile.setdefault("prompt_format", PromptFormat.TEMPLATE)
    profile.setdefault("threads", 2)
    profile.setdefault("seed", 7)
    tiny = ModelProfile(model_path=model, mmproj_path=mmproj, **profile)
    rest.setdefault("fold_delay_s", 0.0)
    return load_settings(profile="tiny", profiles={"tiny": tiny}, **rest)


ServiceFactory = Callable[..., Any]


@pytest.fixture
async def make_service() -> AsyncIterator[ServiceFactory]:
    opened: list[ChatService] = []

    async def make(settings: Settings, db: Path | None = None) -> ChatService:
        service = open_service(settings, db=db)
        await service.start()
        opened.append(service)
        return service

    yield make
    for service in opened:
        await service.close()
