"""Memory text as it is read: message references numbered per conversation, from the store.

The memory's stored text cites messages by store id (memory/numbering.py says why and what a
reference is); the turn's prompt, the inspector, `kotonia memory`, the evaluation and the
notices a user reads number them as the chat does. This asks the store for exactly the
messages a text cites (their numbers and speakers, the counts a range is numbered by, and which
of the rest were deleted) and rewrites the text with them. A deleted message is said in words,
"a deleted message", as the ledger's evidence is (`evidence_said`): left as written, its store
id read as the number of another message. An id that is another conversation's message, or
that no message ever had, is the story's ("Room (#999999)"), and stays as it is.

A chapter is named the same way, by its range in those numbers ("#309-#316", as in "from
#309-#316"), never by its store id: the id is shown nowhere else, differs between a branch and
its source, and reads as a message number. So is a fold job, by its kind and the range it folds
("chapter #309-#316", "refold #36-#38", "major fold"), wherever a person reads of it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from kotonia_tui.chat.events import FoldProgress
from kotonia_tui.domain import (
    FoldJob,
    StoredChapter,
    StoredFoldJob,
    StoredLedgerEntry,
    StoredSynopsis,
)

# NO_MESSAGES and evidence_said re-exported: the layers above say a range with no message left,
# and a ledger entry's evidence, as the memory's texts say them.
from kotonia_tui.memory.numbering import NO_MESSAGES as NO_MESSAGES
from kotonia_tui.memory.numbering import asked_ids, numbered_text, referenced_ids
from kotonia_tui.memory.numbering import evidence_said as evidence_said
from kotonia_tui.store import NotFoundError, Store, StoreError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Numbering:
    """The numbers (and speakers) of the messages some texts cite, by store id."""

    numbers: dict[int, int] = field(default_factory=dict)
    speakers: dict[int, str] = field(default_factory=dict)
    # Every id asked -> how many of the conversation's messages have an id up to it: a range
    # is numbered by these (memory/numbering.py `numbered_text`).
    counts: dict[int, int] = field(default_factory=dict)
    # The cited ids of deleted messages (`Store.deleted_messages`): said in words.
    deleted: frozenset[int] = frozenset()
    # The conversation's speakers: a deleted message's quoted label inside a line must name one.
    names: frozenset[str] = frozenset()

    def text(self, text: str) -> str:
        """`text` with its references numbered, one to a deleted message said in words
        (memory/numbering.py `numbered_text`)."""
        return numbered_text(
            text, self.numbers, self.counts, self.deleted, self.speakers, self.names
        )

    def evidence(self, ids: Iterable[int]) -> list[int | None]:
        """The numbers of the messages `ids` (a ledger entry's evidence), None for one not
        found: deleted since (`evidence_said` says so in words). Read with the ids
        (`numbering`'s `cited`)."""
        return [self.numbers.get(i) for i in ids]

    # The rows a person reads, as shown: a copy with its texts numbered (its id fields stay).

    def synopsis(self, synopsis: StoredSynopsis) -> StoredSynopsis:
        return synopsis.model_copy(
            update={
                "text": self.text(synopsis.text),
                "dropped": tuple(self.text(s) for s in synopsis.dropped),
            }
        )

    def chapter(self, chapter: StoredChapter) -> StoredChapter:
        return chapter.model_copy(
            update={"text": self.text(chapter.text), "note": self.text(chapter.note)}
        )

    def entry(self, entry: StoredLedgerEntry) -> StoredLedgerEntry:
        return entry.model_copy(
            update={"text": self.text(entry.text), "end_note": self.text(entry.end_note)}
        )

    def job(self, job: StoredFoldJob) -> StoredFoldJob:
        if not job.last_error:
            return job
        return job.model_copy(update={"last_error": self.text(job.last_error)})


def row_texts(
    synopses: Iterable[StoredSynopsis] = (),
    chapters: Iterable[StoredChapter] = (),
    ledger: Iterable[StoredLedgerEntry] = (),
    jobs: Iterable[StoredFoldJob] = (),
) -> list[str]:
    """Every text of these rows that `Numbering`'s copies number."""
    return [
        *(t for s in synopses for t in (s.text, *s.dropped)),
        *(t for c in chapters for t in (c.text, c.note)),
        *(t for e in ledger for t in (e.text, e.end_note)),
        *(j.last_error or "" for j in jobs),
    ]


def numbering(
    store: Store, conv_id: int, texts: Iterable[str], cited: Iterable[int] = ()
) -> Numbering:
    """The numbering of what `texts` cite among conversation `conv_id`'s messages, and of the
    message ids `cited` (a ledger entry's evidence: `Numbering.evidence`): one read of the
    store for all of them (`Store.message_places`), and for the texts' references that are no
    message of the conversation, which were deleted (`Store.deleted_messages`: the rest are the
    story's) and, when one is, the conversation's speakers. Only messages still stored are
    numbered.

    The same texts read the same until a message they cite, or one of the conversation's
    before it, is deleted or put back (the prompt's prefix, which this numbers, stays). Beside
    those, only what the story's own ids name can change it (an id of another conversation's
    message that is deleted then reads "a deleted message"), and a quote quoted again of a
    deleted message reads by the conversation's speakers now (memory/numbering.py)."""
    texts = [text for text in texts if text]
    cited = set(cited)
    ids = {i for text in texts for i in asked_ids(text)} | cited
    if not ids:
        return Numbering()
    places = store.message_places(conv_id, ids)
    numbers = {i: n for i, (n, speaker) in places.items() if speaker is not None}
    speakers = {i: s for i, (_n, s) in places.items() if s is not None}
    unfound = {i for text in texts for i in referenced_ids(text)} - numbers.keys()
    deleted = store.deleted_messages(unfound) if unfound else frozenset()
    names: set[str] = set()
    if deleted:
        names = {s for s in speakers.values() if s}
        with contextlib.suppress(NotFoundError):
            conv = store.get_conversation(conv_id)
            names |= {conv.character_name, conv.persona_name}
            names |= {m.character_name for m in store.cast(conv_id)}
        names.discard("")
    counts = {i: n for i, (n, _s) in places.items()}
    return Numbering(numbers, speakers, counts, deleted, frozenset(names))


def cited_numbers(store: Store, conv_id: int, ids: Iterable[int]) -> dict[int, int]:
    """The numbers of those of the message ids `ids` still stored in conversation `conv_id`
    (one read); a deleted one is left out, so `evidence_said` tells it in words."""
    return numbering(store, conv_id, (), ids).numbers


def numbered(store: Store, conv_id: int, text: str) -> str:
    """One text as it is read (`numbering` for it alone)."""
    return numbering(store, conv_id, [text]).text(text) if text else text


# Said for a chapter id that names no chapter of the conversation (`chapter_ranges` found none).
NO_CHAPTER = "a chapter no longer stored"
# A range in message numbers: its first and last messages' numbers, or () when no message of
# the conversation is left in it (`range_numbers`).
Span = tuple[int, int] | tuple[()]


def chapter_span(numbers: Sequence[int] | None) -> str:
    """A chapter as a person knows it: its range as the chat numbers it, "#309-#316" (its first
    and last messages' numbers); `NO_MESSAGES` for an empty one (no message left in it: never
    "#0" nor a range of a message that is not there), `NO_CHAPTER` for None."""
    if numbers is None:
        return NO_CHAPTER
    if not numbers:
        return NO_MESSAGES
    first, last = numbers
    return f"#{first}-#{last}"


def range_ends(first_id: int, last_id: int) -> tuple[int, int]:
    """The ids whose `Store.message_numbers` name the range of message ids `first_id` to
    `last_id` (`range_numbers`): the one before its first, and its last.

    A range (a chapter's, a fold job's) holds the conversation's messages whose ids run from its
    first to its last, and its first need not be one of them: it may have been deleted since
    (the chapter goes stale and is folded again, its range unchanged), and the rest of a range
    too large for one call is queued from the id after the chapter's last, which may be another
    conversation's message (ids interleave when the user goes between chats).
    `message_numbers` counts the conversation's messages up to any id, so looking the first id
    up would give the message before the range when it is no longer a message of it; the one
    before the first counts exactly those before the range."""
    return first_id - 1, last_id


def range_numbers(first_id: int, last_id: int, numbers: Mapping[int, int]) -> Span:
    """The range of message ids `first_id` to `last_id` in the numbers the chat shows: those of
    its first and last messages still stored, or () when none is left. `numbers` holds the
    `Store.message_numbers` of its `range_ends` (a KeyError otherwise: `numbered_range`)."""
    before, last = (numbers[i] for i in range_ends(first_id, last_id))
    return (before + 1, last) if before < last else ()


def numbered_range(first_id: int, last_id: int, numbers: Mapping[int, int]) -> Span | None:
    """`range_numbers`, or None when `numbers` does not hold its ends (read before the range
    was known): such a range is not said, never shown as ids that look like numbers."""
    if any(i not in numbers for i in range_ends(first_id, last_id)):
        return None
    return range_numbers(first_id, last_id, numbers)


def chapter_numbers(
    ranges: Mapping[int, tuple[int, int]], numbers: Mapping[int, int]
) -> dict[int, Span]:
    """Each chapter of `ranges` (chapter id -> its first and last message ids) by its messages'
    numbers (`range_numbers`; `numbers`: `Store.message_numbers` of their `range_ends`); one
    whose ends are not numbered is left out, so it reads as `NO_CHAPTER` rather than as ids
    that look like numbers."""
    return {
        chapter_id: span
        for chapter_id, (first, last) in ranges.items()
        if (span := numbered_range(first, last, numbers)) is not None
    }


def numbered_chapters(store: Store, conv_id: int, ids: Iterable[int]) -> dict[int, Span]:
    """The chapters `ids` of conversation `conv_id` by their messages' numbers (two reads); an
    id of no chapter of it is left out."""
    ranges = store.chapter_ranges(conv_id, ids)
    ends = [i for span in ranges.values() for i in range_ends(*span)]
    return chapter_numbers(ranges, store.message_numbers(conv_id, ends) if ends else {})


def job_ends(job: FoldJob) -> tuple[int, int] | None:
    """The ids whose `Store.message_numbers` name `job`'s range (`job_label`): its
    `range_ends`; None for a job with no range (a major fold)."""
    if job.first_message_id is None or job.last_message_id is None:
        return None
    return range_ends(job.first_message_id, job.last_message_id)


def job_label(job: FoldJob, numbers: Mapping[int, int]) -> str:
    """A fold job as a person knows it: its kind and the range it folds, numbered as the chat
    numbers messages, "chapter #5-#9" or "refold #36-#38" (`range_numbers`, as a chapter's);
    "refold (no messages left)" when every message of it was deleted; a major fold has no
    range (it takes the oldest chapters when it runs), so "major fold". `numbers`:
    `Store.message_numbers` of `job_ends` (among others). Never its store id, which reads as a
    message number (and no command takes it). A range `numbers` cannot name (a view read
    before the job was queued) is not said: the kind alone."""
    if job.first_message_id is None or job.last_message_id is None:
        return job.kind.label
    span = numbered_range(job.first_message_id, job.last_message_id, numbers)
    if span is None:
        return job.kind.label
    return f"{job.kind.label} {chapter_span(span)}"


def job_numbers(store: Store, conv_id: int, jobs: Iterable[FoldJob]) -> dict[int, int]:
    """The numbers `job_label` names `jobs` of conversation `conv_id` by (one read)."""
    ends = [i for j in jobs if (span := job_ends(j)) is not None for i in span]
    return store.message_numbers(conv_id, ends) if ends else {}


def told(store: Store, event: FoldProgress) -> FoldProgress:
    """`event` as a person reads it: the job named by `job_label`, and its detail (what
    landed, why it failed) naming messages as the chat numbers them (the job's stored error
    keeps the store ids it was written with). A store that cannot be read (a StoreError) leaves
    `event` as it is, its job named by its kind alone (`FoldProgress.job_label`): telling of a
    fold never fails the turn, the deletion or the job that sends it."""
    conv_id = event.conversation_id
    try:
        label = job_label(event.job, job_numbers(store, conv_id, [event.job]))
        return replace(event, label=label, detail=numbered(store, conv_id, event.detail))
    except StoreError as exc:
        log.warning("conversation %s: a fold told by its kind alone: %s", conv_id, exc)
        return event
