"""Small records the store returns that are not shared domain models."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from kotonia_tui.domain import (
    StoredChapter,
    StoredFoldJob,
    StoredLedgerEntry,
    StoredSynopsis,
    TurnMetrics,
)


class MemoryState(BaseModel):
    """Where a conversation's prompt stands: what is verbatim and which memory it carries.

    All ids are None until the first fold; `verbatim_start_id` None means "from the first message".
    """

    conversation_id: int
    verbatim_start_id: int | None = None  # the first message that goes to the prompt verbatim
    applied_chapter_id: int | None = None  # the newest chapter the prompt carries
    applied_synopsis_id: int | None = None
    forced_cut_through_id: int | None = None  # the last message cut by the hard ceiling
    memory_text: str = ""  # the memory block exactly as the prompt carries it
    memory_tokens: int = 0  # its size, counted by the model named in memory_model_key
    memory_model_key: str = ""
    forced_cuts: int = 0  # how many times a turn cut messages out at the ceiling
    # How many of the conversation's chapters were retired when the memory was applied (their
    # messages deleted): a chapter retired since is still in `memory_text`, so the next turn
    # applies the memory again (chat/memory_snapshot.py `LandedMemory.pending`).
    applied_retired: int = 0
    updated_at: datetime | None = None  # None: never saved (the default state)


class MemoryRows(BaseModel):
    """The rows a conversation's memory is built from (store.memory_rows), all read in one
    transaction: a fold committed meanwhile (a chapter with its ledger changes, a synopsis, a
    retirement, each one transaction) is in every one of them or in none."""

    state: MemoryState
    retired: int  # how many of the conversation's chapters are retired
    synopsis: StoredSynopsis | None  # the current version
    chapters: list[StoredChapter]  # live: not in the synopsis, not superseded, not retired
    ledger: list[StoredLedgerEntry]  # every entry, ended ones too, in id order
    live: list[StoredLedgerEntry]  # the live entries, in id order
    versions: list[StoredSynopsis] = []  # every synopsis version, oldest first (when asked)
    jobs: list[StoredFoldJob] = []  # the fold jobs of the statuses asked for, oldest first


class Retirement(BaseModel):
    """What retiring chapters did (store.retire_chapters): the chapters retired now (those
    retired before are left as they were) and how many live ledger entries ended with them."""

    chapters: list[StoredChapter]
    ended_entries: int = 0


class CharacterSeen(BaseModel):
    """A character card the app has loaded at least once."""

    key: str
    name: str
    card_hash: str
    source_path: str
    first_seen: datetime
    last_seen: datetime


class TurnMetricsRecord(BaseModel):
    """One stored `TurnMetrics` with the message it produced and when."""

    id: int
    conversation_id: int
    message_id: int | None
    created_at: datetime
    metrics: TurnMetrics
