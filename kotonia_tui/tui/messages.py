"""Textual messages the app posts to itself: model loading and the chat service's events."""

from __future__ import annotations

from textual.message import Message

from kotonia_tui.chat.events import ServiceEvent
from kotonia_tui.chat.service import ChatService


class LoadProgress(Message):
    """The model (or the first-run assembly of the default model) made progress."""

    def __init__(self, what: str, done: int, total: int) -> None:
        super().__init__()
        self.what = what
        self.done = done
        self.total = total


class ServiceOpened(Message):
    """The load worker opened the chat service (store and model); the app starts it."""

    def __init__(self, service: ChatService) -> None:
        super().__init__()
        self.service = service


class ServiceReady(Message):
    """The chat service is loaded and started."""


class ServiceFailed(Message):
    """Opening the chat service failed; `error` is the exact text."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class ServiceEventMessage(Message):
    """A `FoldProgress` or `MemoryNotice` from the chat service."""

    def __init__(self, event: ServiceEvent) -> None:
        super().__init__()
        self.event = event
