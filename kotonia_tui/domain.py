"""Pydantic models shared by every layer: messages and their segments, memory, fold jobs, metrics.

Nothing here does I/O. The store persists these, memory reasons about them, the engine reports
`TurnMetrics`, and the TUI renders them. A model not yet saved has no id (`Message`, `Chapter`,
...); what the store returns is its `Stored...` subclass, whose id is never None, so code that
works with stored rows never checks for a missing id.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


def utcnow() -> datetime:
    """Aware UTC now; every timestamp the app writes goes through this."""
    return datetime.now(UTC)


class Role(StrEnum):
    """Who wrote a message. `character` is the model's side of the story."""

    USER = "user"
    CHARACTER = "character"
    SYSTEM = "system"


class SegmentKind(StrEnum):
    """What a piece of a reply is: what happens, what is said aloud, what is only thought."""

    NARRATION = "narration"
    DIALOGUE = "dialogue"
    THOUGHT = "thought"


class Segment(BaseModel):
    """One piece of a message. Dialogue carries who speaks to whom; the chronicler relies on it."""

    model_config = ConfigDict(frozen=True)

    kind: SegmentKind
    text: str
    speaker: str | None = None
    listener: str | None = None


class MessageStatus(StrEnum):
    """How a message ended. Only `complete` replies are whole; the others are shown as cut."""

    COMPLETE = "complete"
    CANCELLED = "cancelled"  # the user pressed Esc
    CUT = "cut"  # the window or the reply cap stopped it (finish_reason == "length")
    ERROR = "error"  # the model call failed part way


class Alternative(BaseModel):
    """One regenerated version of a reply (a SillyTavern "swipe")."""

    text: str
    segments: list[Segment] = Field(default_factory=list)
    status: MessageStatus = MessageStatus.COMPLETE
    created_at: datetime = Field(default_factory=utcnow)
    extra: dict[str, object] = Field(default_factory=dict)
    # Each version keeps its own cut reason and thinking block, so choosing it restores both.
    status_reason: str | None = None
    reasoning: str | None = None


class Message(BaseModel):
    """A stored message. `text` is the chosen version; `alternatives` holds all versions."""

    id: int | None = None
    conversation_id: int | None = None
    role: Role
    speaker: str
    text: str
    segments: list[Segment] = Field(default_factory=list)
    images: list[str] = Field(default_factory=list)  # content hashes into the image table
    created_at: datetime = Field(default_factory=utcnow)
    edited: bool = False
    status: MessageStatus = MessageStatus.COMPLETE
    status_reason: str | None = None
    reasoning: str | None = None  # a model's thinking block: kept apart, never shown as dialogue
    alternatives: list[Alternative] = Field(default_factory=list)
    chosen: int = 0
    token_counts: dict[str, int] = Field(default_factory=dict)  # model key -> exact token count
    extra: dict[str, object] = Field(default_factory=dict)  # import fields kept for round trips
    # The card that spoke a group reply (its key); None for the user, a note, a one-card chat.
    character_key: str | None = None


class StoredMessage(Message):
    """A message as the store returns it: saved, so it has an id and a conversation."""

    id: int
    conversation_id: int


class Conversation(BaseModel):
    """One never-ending story between the user (under a persona) and one character."""

    id: int | None = None
    character_key: str  # the card's stable key (file stem), not its hash: cards get edited
    character_name: str
    persona_name: str  # who the user plays, as the conversation uses it (copied from the persona)
    persona_description: str = ""
    persona_id: int | None = None  # the stored persona it is played as (None: not linked)
    title: str = ""
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    message_count: int = 0
    extra: dict[str, object] = Field(default_factory=dict)


class StoredConversation(Conversation):
    """A conversation as the store returns it."""

    id: int


class ReplyOrder(StrEnum):
    """Who answers in a group (SillyTavern's activation strategies)."""

    NATURAL = "natural"  # a member named in the last message first, then by talkativeness
    LIST = "list"  # every unmuted member, in the cast's order
    MANUAL = "manual"  # the player picks who speaks next


class CastMember(BaseModel):
    """One card in a group conversation's cast. The cast's order is stable: the shared setup
    joins the cards in it, so a member's place never changes while it stays."""

    character_key: str
    character_name: str
    position: int = 0
    muted: bool = False  # a muted member is in the setup but is never picked to answer


@dataclass(frozen=True)
class GroupCast:
    """An imported group's cast: (card key, name, muted) in order, and whose lines are whose
    (the name a line is signed with -> its card key)."""

    members: tuple[tuple[str, str, bool], ...]
    speakers: dict[str, str]


class QuickReply(BaseModel):
    """A snippet of the player's own: global (character_key None) or one character's."""

    id: int | None = None
    character_key: str | None = None
    label: str
    text: str
    send: bool = True  # sent at once; False: put into the input box to edit
    position: int = 0


class StoredQuickReply(QuickReply):
    id: int


# The first line of a synopsis quoted from its chapters: the model reading the memory, and the
# user in the inspector, are told it quotes the story rather than summarizing it. Only said to
# them: that a synopsis is quoted is its `origin`.
QUOTED_SYNOPSIS_LEAD = (
    "Quoted from the story so far (the chronicler's summaries could not be used):"
)
# A synopsis quoted at once for a turn that had no room (chat/fold/quote_first.py): said to
# the model and the user; that it is quoted is its `origin`.
QUOTED_FIRST_LEAD = "Quoted from the story so far (the chronicler's summary follows):"


class ChapterOrigin(StrEnum):
    """How a chapter was made."""

    SUMMARY = "summary"  # the chronicler's chapter of its range
    QUOTED = "quoted"  # the range's own lines, when the chronicler's answer was unusable
    PARTS = "parts"  # one long message, summarized part by part


class SynopsisOrigin(StrEnum):
    """How a synopsis version was made."""

    SUMMARY = "summary"  # the chronicler's synopsis
    QUOTED = "quoted"  # the old synopsis and the chapters quoted, when no draft could be used


class LedgerSource(StrEnum):
    """Who wrote a ledger entry."""

    CHRONICLER = "chronicler"  # an item of the chronicler's chapter
    READBACK = "readback"  # the user's own sentence, quoted by code for what the chapter missed


class Chapter(BaseModel):
    """The summary of one folded range of messages. Written once; never rewritten."""

    id: int | None = None
    conversation_id: int
    first_message_id: int
    last_message_id: int
    text: str
    created_at: datetime = Field(default_factory=utcnow)
    model: str = ""
    gen_ms: float = 0.0
    tokens: int = 0
    stale: bool = False
    in_synopsis: bool = False  # folded into the synopsis by a major GC (kept for audit)
    story_time: str | None = None
    superseded_by: int | None = None  # a refold's new chapter; the old one is kept for audit
    # Every message of its range was deleted (or only notes that are not part of the story
    # are left): it left the memory with no successor, and the entries it wrote ended with
    # it; kept for audit. A refold of its range (the deletion undone) supersedes it.
    retired: bool = False
    # The chronicler's answer as JSON (memory/chapter_schema.py); None for a prose chapter
    # written before structured chapters, which keeps its text and its place in memory.
    structure: str | None = None
    # Names and numbers from the user's lines that the chapter and its ledger entries still
    # lack after the readback's one retry (kept so the inspector and the audit can show them).
    readback_misses: list[str] = Field(default_factory=list)
    note: str = ""  # said beside the text (summarized in parts; quoted, and why)
    origin: ChapterOrigin = ChapterOrigin.SUMMARY

    @property
    def quoted(self) -> bool:
        """An extract of the range's own lines, stored when the chronicler's answer for it
        was unusable (chat/fold/chapters.py), not a summary."""
        return self.origin is ChapterOrigin.QUOTED


class StoredChapter(Chapter):
    """A chapter as the store returns it."""

    id: int


class Synopsis(BaseModel):
    """One version of the old generation. All versions are kept; one is current."""

    id: int | None = None
    conversation_id: int
    version: int
    text: str
    through_message_id: int  # the last message whose content this version covers
    created_at: datetime = Field(default_factory=utcnow)
    model: str = ""
    gen_ms: float = 0.0
    tokens: int = 0
    current: bool = True
    target_tokens: int = 0  # the length it was written to hold (0: none recorded)
    stale: bool = False  # it folded a chapter that was refolded since: never a rebuild's base
    origin: SynopsisOrigin = SynopsisOrigin.SUMMARY
    # Sentences of the chronicler's draft left out: none of them rests on what it folds
    # (memory/grounding.py `ground_prose`); kept for the inspector, never in the prompt.
    dropped: tuple[str, ...] = ()

    @property
    def quoted(self) -> bool:
        """Its chapters quoted, stored when no draft could be used (every one ran too long,
        only said the old synopsis again, or was refused) or no room was left to ask again
        (chat/fold/synopsis.py)."""
        return self.origin is SynopsisOrigin.QUOTED


class StoredSynopsis(Synopsis):
    """A synopsis version as the store returns it."""

    id: int


class LedgerKind(StrEnum):
    """What a ledger entry records. The letter of its label ("T7") says the kind."""

    USER_FACT = "user_fact"  # what the user says about themselves: a fact
    CONSTRAINT = "constraint"  # a rule the user set (stored as named; users read "rule")
    DECISION = "decision"  # with its reasons and the alternatives rejected
    PROMISE = "promise"
    THREAD = "thread"  # an open question or plan; a later chapter resolves it by label

    @property
    def letter(self) -> str:
        return LEDGER_LETTERS[self]

    @property
    def label(self) -> str:
        """The kind as a user reads it."""
        return LEDGER_KIND_LABELS[self]


LEDGER_KIND_LABELS = {
    LedgerKind.USER_FACT: "user fact",
    LedgerKind.CONSTRAINT: "rule",
    LedgerKind.DECISION: "decision",
    LedgerKind.PROMISE: "promise",
    LedgerKind.THREAD: "thread",
}

LEDGER_LETTERS = {
    LedgerKind.USER_FACT: "F",
    LedgerKind.CONSTRAINT: "C",
    LedgerKind.DECISION: "D",
    LedgerKind.PROMISE: "P",
    LedgerKind.THREAD: "T",
}


class LedgerEnd(StrEnum):
    RESOLVED = "resolved"  # a thread a later chapter closed
    SUPERSEDED = "superseded"  # a fact or rule a later chapter replaced
    # Its chapter was retired: the messages it rests on were deleted. Ended by that chapter.
    RETIRED = "retired"


class LedgerEntry(BaseModel):
    """One append-only entry of a conversation's ledger, written by a chapter.

    An entry is never rewritten: a later chapter ends it (resolved or superseded), and it then
    leaves the prompt but stays in the store (shown "valid from #1-#4 to #5-#9": the chapters
    that wrote and ended it, by their ranges in message numbers, chat/numbering.py
    `chapter_span`; `chapter_id` and `ended_by_chapter_id` hold their store ids). An entry
    whose chapter was retired (its messages deleted) ends with it, `retired`, ended by that
    same chapter (`retired_with_its_chapter`).
    """

    id: int | None = None
    conversation_id: int
    kind: LedgerKind
    text: str
    subject: str = ""  # whom it is about or who made it
    evidence: list[int] = Field(default_factory=list)  # message ids
    chapter_id: int | None = None  # the chapter that wrote it
    ended_by_chapter_id: int | None = None
    end: LedgerEnd | None = None
    end_note: str = ""  # how a thread was resolved
    created_at: datetime = Field(default_factory=utcnow)
    source: LedgerSource = LedgerSource.CHRONICLER

    @property
    def retired_with_its_chapter(self) -> bool:
        """Ended because the chapter that wrote it was retired (its messages were deleted),
        not by a later chapter: shown "from #1-#4, retired", never "#1-#4 to #1-#4"."""
        return self.end is LedgerEnd.RETIRED

    @property
    def quotes_user(self) -> bool:
        """The user's own sentence, quoted by the readback (not the chronicler's paraphrase)."""
        return self.source is LedgerSource.READBACK


@dataclass(frozen=True)
class LedgerEnding:
    """A chapter ends an earlier ledger entry (by id), and says how."""

    entry_id: int
    end: LedgerEnd
    note: str = ""


@dataclass(frozen=True)
class NewChapter:
    """A chapter a fold is about to store, with what it does to the ledger."""

    chapter: Chapter
    entries: tuple[LedgerEntry, ...] = ()
    endings: tuple[LedgerEnding, ...] = ()


class StoredLedgerEntry(LedgerEntry):
    """A ledger entry as the store returns it."""

    id: int
    chapter_id: int
    # The number its label shows; None: its id. A branch's copy keeps the original's label:
    # the copied memory block and chapters name it so ("Resolved: T7"), and the branch's next
    # prompt then carries the original's ledger lines byte for byte (store/branching.py).
    label_number: int | None = None

    @property
    def label(self) -> str:
        """How prompts name it: the kind's letter and its number ("T7"), unique within its
        conversation."""
        number = self.id if self.label_number is None else self.label_number
        return f"{self.kind.letter}{number}"


class FoldKind(StrEnum):
    CHAPTER = "chapter"
    MAJOR_GC = "major_gc"  # stored as named; users read "major fold" (`label`)
    REFOLD = "refold"  # an edit inside a folded range

    @property
    def label(self) -> str:
        """The kind as a user reads it."""
        return FOLD_KIND_LABELS[self]


FOLD_KIND_LABELS = {
    FoldKind.CHAPTER: "chapter",
    FoldKind.MAJOR_GC: "major fold",
    FoldKind.REFOLD: "refold",
}


class FoldStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class FoldJob(BaseModel):
    """A durable unit of background folding work."""

    id: int | None = None
    conversation_id: int
    kind: FoldKind
    first_message_id: int | None = None
    last_message_id: int | None = None
    status: FoldStatus = FoldStatus.PENDING
    attempts: int = 0
    last_error: str | None = None
    not_before: datetime = Field(default_factory=utcnow)
    created_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    claimed_by: str | None = None  # the worker running it (or that ran it last)
    lease_until: datetime | None = None  # its claim holds until then unless renewed


class StoredFoldJob(FoldJob):
    """A fold job as the store returns it."""

    id: int


class TurnMetrics(BaseModel):
    """Figures of one model call: how much of the prompt the KV cache saved."""

    prompt_positions: int = 0  # KV cells the prompt occupies
    reused: int = 0  # cells kept from the previous call
    evaluated: int = 0  # cells computed by this call
    prompt_ms: float = 0.0
    generated: int = 0
    gen_ms: float = 0.0
    tokens_per_s: float = 0.0
    finish_reason: str = ""
    images: int = 0
    slot: str = "chat"
    restored: int = 0  # of `reused`: cells loaded from a saved state (its first call only)

    def stats_dict(self) -> dict[str, object]:
        """The keys `kotonia chat --stats` prints, in a stable order."""
        return {
            "prompt_positions": self.prompt_positions,
            "reused": self.reused,
            "evaluated": self.evaluated,
            "prompt_ms": round(self.prompt_ms, 2),
            "tokens_per_s": round(self.tokens_per_s, 2),
            "generated": self.generated,
            "finish_reason": self.finish_reason,
            "images": self.images,
            "restored": self.restored,
        }


class Persona(BaseModel):
    """Who the user plays."""

    name: str = "User"
    description: str = ""


class StoredPersona(Persona):
    """A persona kept in the database: chosen in the app, one of them the default."""

    id: int
    image: str | None = None  # content hash of its picture in the image table
    is_default: bool = False
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


ChatRole = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class ImageInput:
    """An image for the model: its bytes and a stable key (the content hash) for KV reuse."""

    data: bytes
    key: str
    mime: str = "image/png"


@dataclass(frozen=True)
class ChatMessage:
    """One message of a prompt, before the engine's prompt format renders it.

    `name` is who speaks (the transcript format writes "name: content"); an empty name renders
    as a plain paragraph (the memory exchange, instructions).
    """

    role: ChatRole
    content: str
    name: str = ""
    images: tuple[ImageInput, ...] = ()


# The deepest a note may be placed: SillyTavern's MAX_INJECTION_DEPTH (public/script.js), past
# which its `doChatInject` places no note (an Author's Note or a card's Character's Note). It
# was 1000 (SillyTavern's release branch of September 2024 says so); its pull request #3800,
# "Increase maximum injection depth and WI order" (merged 2025-04-02), made it 10000, as the
# script.js of later releases says.
MAX_AUTHOR_NOTE_DEPTH = 10000


@dataclass(frozen=True)
class DepthNote:
    """A note placed `depth` messages from the end of the history, as a message of `role`:
    the Author's Note, or a card's Character's Note (SillyTavern's `depth_prompt`).

    `text` has its macros filled in. `name` signs a user or assistant note: a user note with
    the persona's name, as SillyTavern signs it; an assistant note with its own card's
    character, which is SillyTavern's signature in a one-card chat but not in a group (there
    SillyTavern signs it with whoever answers; the owner's name keeps the line the same whoever
    answers, so the cache holds; notes joined into one line take the first one's name).
    `owner` says whose note it is, for the inspector."""

    text: str
    depth: int
    role: ChatRole = "system"
    name: str = ""
    owner: str = ""


class GenerationSettings(BaseModel):
    """How replies are sampled and how long they may be, as one layer sets them: the model
    profile sets every value; a character or a conversation sets only what it overrides
    (None: the layer below decides). Bounds as the profile's (config.ModelProfile)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    temperature: float | None = Field(default=None, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)  # 0: no top-k cut
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repeat_penalty: float | None = Field(default=None, ge=0.0)
    reply_max_tokens: int | None = Field(default=None, ge=16)  # the reply reserve too


class ChatSettings(BaseModel):
    """What a character (every conversation with it) or one conversation sets over the model
    profile: generation settings, an Author's Note, World Info files. Stored as JSON."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    generation: GenerationSettings = Field(default_factory=GenerationSettings)
    # Empty: the layer below's note. Placed `author_note_depth` messages from the end of the
    # history (0: after it, where it keeps the prompt cache; docs/architecture.md).
    author_note: str = ""
    author_note_depth: int | None = Field(default=None, ge=0, le=MAX_AUTHOR_NOTE_DEPTH)
    # File names in the World Info folder; a conversation's add to its character's.
    world_info: tuple[str, ...] = ()
    # Tokens of keyed lorebook entries per turn (None: `lore_budget_ratio` of the window).
    lore_budget: int | None = Field(default=None, ge=0)
