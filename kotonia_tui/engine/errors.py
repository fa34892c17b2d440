"""Engine errors. Each message is one line a user can act on: it names the file or the figure."""

from __future__ import annotations


class EngineError(Exception):
    """Base of every error the engine raises on purpose."""


class ModelFileError(EngineError):
    """A model or projector file is missing, unreadable, not a GGUF, or does not fit."""


class PromptTooLongError(EngineError):
    """The prompt plus the reply reserve does not fit in the context window; nothing was sent."""

    def __init__(self, prompt_cells: int, reserve: int, n_ctx: int) -> None:
        self.prompt_cells = prompt_cells
        self.reserve = reserve
        self.n_ctx = n_ctx
        super().__init__(
            f"the prompt needs {prompt_cells} KV cells plus {reserve} for the reply, "
            f"but the context window holds {n_ctx}: nothing was sent to the model"
        )


class ImageError(EngineError):
    """An image that cannot be used (corrupt, too large, unsupported, or no projector loaded)."""


class EngineClosedError(EngineError):
    """The engine was closed; no more calls can run."""
