"""Widgets of the Kotonia TUI."""
