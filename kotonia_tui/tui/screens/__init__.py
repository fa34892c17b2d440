"""Screens of the Kotonia TUI."""
