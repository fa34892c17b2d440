"""Kotonia TUI: a terminal role-play chat with generational memory."""

__version__ = "0.1.0"
