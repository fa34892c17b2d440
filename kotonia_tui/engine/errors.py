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


class SlotTakenError(EngineError):
    """Another call used a KV context while this call waited between two of its steps: a turn
    that took over the prewarm of its prompt part way (and went on from what it had
    evaluated), or a chat call that came before a settle. The context is consistent; this
    call stops without touching it."""


class ImageError(EngineError):
    """An image that cannot be used (corrupt, too large, unsupported, or no projector loaded)."""


class EngineClosedError(EngineError):
    """The engine was closed; no more calls can run."""


class BackendUnavailableError(EngineError):
    """The inference server cannot take the call now: down, overloaded (502/503/504), silent
    past the timeout, or the call gave way to a user turn. Not the request's fault: a
    background job waits `retry_after_s` and tries again without counting it as a failure."""

    retry_after_s: float = 5.0


class StreamInterruptedError(BackendUnavailableError):
    """The reply stream stopped part way (connection lost, or the server ended it early).

    `partial` holds what arrived before the break (finish_reason LENGTH: a cut reply), so a
    caller can keep it, marked, instead of losing it.
    """

    def __init__(self, message: str, partial: object = None) -> None:
        super().__init__(message)
        self.partial = partial  # a GenerationResult (typed loosely: types imports nothing here)


class CallPreemptedError(BackendUnavailableError):
    """A background call was stopped so that a waiting user turn could run first."""

    retry_after_s = 0.5


class ServerResponseError(EngineError):
    """The server refused the request (bad request, wrong API key, unknown model, 500)."""


class CredentialError(EngineError):
    """An API key or a server URL's credentials that cannot be used (the message names the
    variable or the field, never the secret)."""
