"""Chat-service fixtures: a real store file, the shipped cards and a tiny real model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from kotonia_tui.chat.bootstrap import open_service
from kotonia_tui.chat.events import ReplyDelta
from kotonia_tui.chat.service import ChatService
from kotonia_tui.config import Settings
from tests.settings import tiny_settings

__all__ = ["tiny_settings"]


async def cancel_turn_after(turn: Any, deltas: int) -> None:
    """Read a turn's events and cancel it at its `deltas`-th reply delta."""
    seen = 0
    async for event in turn:
        if isinstance(event, ReplyDelta):
            seen += 1
            if seen == deltas:
                turn.cancel()


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
