"""How a model call's result becomes a stored reply: its status and why, and how a
continuation joins the reply it carries on."""

from __future__ import annotations

from kotonia_tui.domain import MessageStatus
from kotonia_tui.engine import FinishReason, GenerationResult


def reply_status(
    result: GenerationResult, reply_cap: int, n_ctx: int
) -> tuple[MessageStatus, str | None]:
    """How a finished model call is stored: complete, cancelled or cut, and the reason."""
    if result.finish_reason is FinishReason.CANCELLED:
        return MessageStatus.CANCELLED, "stopped by the user"
    if result.finish_reason is FinishReason.LENGTH:
        if result.metrics.generated >= reply_cap:
            return MessageStatus.CUT, f"cut: the reply reached its cap of {reply_cap} tokens"
        return MessageStatus.CUT, f"cut: the context window ({n_ctx} tokens) is full"
    return MessageStatus.COMPLETE, None


def join_continuation(before: str, written: str) -> str:
    """A continued reply: the new text goes on exactly where the old one stopped.

    The model continues from the old text itself (it is the prompt's last words), so a word
    cut in half is finished without a space ("walk" + "ing"), and a continuation that opens
    with a space brings its own. Only a space on both sides of the join is one too many.
    """
    if before[-1:].isspace() and written[:1].isspace():
        written = written.lstrip()
    return (before + written).rstrip()
