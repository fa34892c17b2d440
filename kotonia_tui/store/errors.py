"""Errors the store raises. Every message names the file, row or value at fault."""

from __future__ import annotations


class StoreError(Exception):
    """The database cannot do what was asked; the message says why in one line."""


class NotFoundError(StoreError):
    """A conversation, message, job or image id that is not in the database."""
