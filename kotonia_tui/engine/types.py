"""What goes into a model call and what comes out of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, StrEnum

from kotonia_tui.domain import ChatMessage, GenerationSettings, ImageInput, TurnMetrics


class Slot(StrEnum):
    """Which KV context a call uses. Folds get their own so they never evict the chat's cache.

    PREWARM is a spare full-size context: after a fold lands, the post-fold prompt is evaluated
    there in the background, and the next chat call takes whichever of CHAT and PREWARM shares
    the longer prefix with its prompt (the two swap), so even the turn that applies a fold
    evaluates little more than its new tokens.
    """

    CHAT = "chat"
    FOLD = "fold"
    PREWARM = "prewarm"


class Priority(IntEnum):
    """Lower runs first: a waiting user turn goes before a background fold. A prewarm goes
    before the folds (it exists to make the next turn cheap, and a major fold queued as the
    chapter lands must not hold it back until the turn it prepares arrives)."""

    INTERACTIVE = 0
    PREWARM = 5
    BACKGROUND = 10


@dataclass(frozen=True)
class Work:
    """Model work done by the calls of one slot since the engine opened: prompt cells
    evaluated and tokens generated. It only grows, so a caller waiting for a background call
    (a turn waiting for a fold) sees whether it moves."""

    evaluated: int = 0
    generated: int = 0


@dataclass(frozen=True)
class StateRef:
    """Which saved KV state a chat call continues, so a restart costs only what is new.

    `name` is the conversation's own state (letters, digits and dashes: it is part of a file
    name); the first `shared_messages` messages of the prompt are the character's setup, the
    same in every conversation with that card, whose state is saved once and lets a new
    conversation start warm. `setup_owner` (letters, digits, dashes) starts the setup state's
    name, so the setup states of a card or a persona can be found and removed when it goes.
    """

    name: str
    shared_messages: int = 1
    setup_owner: str = ""


@dataclass(frozen=True)
class GenerationRequest:
    """A prompt (as messages) and how to sample the reply."""

    messages: tuple[ChatMessage, ...]
    max_tokens: int
    slot: Slot = Slot.CHAT
    priority: Priority = Priority.INTERACTIVE
    # The transcript format needs to know who speaks next and who must not be impersonated.
    reply_name: str = ""
    user_name: str = ""
    extra_stops: tuple[str, ...] = ()
    temperature: float | None = None  # None: `sampling`'s, else the profile's
    # A character's or a conversation's settings over the profile (None values: the profile's).
    sampling: GenerationSettings | None = None
    prefill: str = ""  # text the reply continues from ("continue" an unfinished reply)
    prefill_only: bool = False  # evaluate the prompt into the slot and stop (a prewarm)
    # A JSON schema (as JSON text) the reply must follow: enforced by a grammar in-process,
    # by the server's structured-output field on a server backend. The reply starts at the
    # schema's root, so a request with a schema has no prefill.
    json_schema: str | None = None
    repeat_penalty: float | None = None  # None: `sampling`'s, else the profile's (1.0: off)
    state: StateRef | None = None  # the saved KV state this chat call may start from


class FinishReason(StrEnum):
    STOP = "stop"  # end of sequence or a stop string
    LENGTH = "length"  # the reply cap or the window: the reply is cut
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class TextDelta:
    """A piece of the visible reply."""

    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    """A piece of a thinking block: shown apart, never as dialogue, never fed to memory."""

    text: str


@dataclass
class GenerationResult:
    """The whole call: the reply, any reasoning, why it ended, and the figures."""

    text: str
    reasoning: str
    finish_reason: FinishReason
    metrics: TurnMetrics = field(default_factory=TurnMetrics)
    stop_string: str | None = None  # the stop string that ended the reply, if one did

    @property
    def cut(self) -> bool:
        return self.finish_reason is FinishReason.LENGTH


StreamEvent = TextDelta | ReasoningDelta | GenerationResult


__all__ = [
    "ChatMessage",
    "FinishReason",
    "GenerationRequest",
    "GenerationResult",
    "ImageInput",
    "Priority",
    "ReasoningDelta",
    "Slot",
    "StateRef",
    "StreamEvent",
    "TextDelta",
]
