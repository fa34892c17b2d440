"""Errors reading a chat file. Every message names the file and the line or item at fault."""

from __future__ import annotations


class ImportFormatError(ValueError):
    """A chat file that cannot be imported; the message names the file and the line."""
