"""The chat layer's user-facing errors, apart from the modules that raise them, so the CLI can
name them without loading the store or the engine (`kotonia --version` stays instant)."""

from __future__ import annotations


class ChatError(Exception):
    """A request the service cannot carry out; the message says why in one line."""


class AttachmentError(ValueError):
    """An image that cannot be attached; the message names the file and the problem."""


class UnknownCharacterError(LookupError):
    """No card has that key or name."""


class PersonaError(ValueError):
    """A persona that cannot be made as asked; the message names the field and the value."""


class ManageError(ValueError):
    """A conversation change that cannot be made; the message says why in one line."""
