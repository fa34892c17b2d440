"""Memory text as it is read: message references numbered per conversation, from the store.

The memory's stored text cites messages by store id (memory/numbering.py says why and what a
reference is); the turn's prompt, the inspector, `kotonia memory` and the notices a user reads
number them as the chat does. This asks the store for exactly the messages a text cites (their
numbers and speakers; ids of no message of the conversation are not found, so stay as they
are) and rewrites the text with them.

A chapter is named the same way, by its range in those numbers ("#309-#316", as in "from
#309-#316"), never by its store id: the id is shown nowhere else, differs between a branch and
its source, and reads as a message number. So is a fold job, by its kind and the range it folds
("chapter #309-#316", "refold #36-#38", "major fold"), wherever a person reads of it.
"""

from __future__ import annotations

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
from kotonia_tui.memory.numbering import referenced_ids, renumber
from kotonia_tui.store import Store


@dataclass(frozen=True)
class Numbering:
    """The numbers (and speakers) of the messages some texts cite, by store id."""

    numbers: dict[int, int] = field(default_factory=dict)
    speakers: dict[int, str] = field(default_factory=dict)

    def text(self, text: str) -> str:
        """`text` with its references numbered (those to messages found; the rest as they are)."""
        return renumber(text, self.numbers, self.speakers)

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


def numbering(store: Store, conv_id: int, texts: Iterable[str]) -> Numbering:
    """The numbering of what `texts` cite among conversation `conv_id`'s messages: one read
    of the store for all of them."""
    ids = {i for text in texts if text for i in referenced_ids(text)}
    if not ids:
        return Numbering()
    cited = store.cited_messages(conv_id, ids)
    return Numbering(
        {i: number for i, (number, _speaker) in cited.items()},
        {i: speaker for i, (_number, speaker) in cited.items()},
    )


def numbered(store: Store, conv_id: int, text: str) -> str:
    """One text as it is read (`numbering` for it alone)."""
    return numbering(store, conv_id, [text]).text(text) if text else text


# Said for a chapter id that names no chapter of the conversation (`chapter_ranges` found none).
NO_CHAPTER = "a chapter no longer stored"


def chapter_span(numbers: Sequence[int] | None) -> str:
    """A chapter as a person knows it: its range as the chat numbers it, "#309-#316" (its first
    and last messages' numbers); `NO_CHAPTER` for None."""
    if numbers is None:
        return NO_CHAPTER
    first, last = numbers
    return f"#{first}-#{last}"


def chapter_numbers(
    ranges: Mapping[int, tuple[int, int]], numbers: Mapping[int, int]
) -> dict[int, tuple[int, int]]:
    """Each chapter of `ranges` (chapter id -> its first and last message ids) by its messages'
    `numbers` (`Store.message_numbers` of those ids); one whose ends are not numbered is left
    out, so it reads as `NO_CHAPTER` rather than as ids that look like numbers."""
    return {
        chapter_id: (numbers[first], numbers[last])
        for chapter_id, (first, last) in ranges.items()
        if first in numbers and last in numbers
    }


def numbered_chapters(store: Store, conv_id: int, ids: Iterable[int]) -> dict[int, tuple[int, int]]:
    """The chapters `ids` of conversation `conv_id` by their messages' numbers (two reads); an
    id of no chapter of it is left out."""
    ranges = store.chapter_ranges(conv_id, ids)
    ends = [i for span in ranges.values() for i in span]
    return chapter_numbers(ranges, store.message_numbers(conv_id, ends) if ends else {})


def job_ends(job: FoldJob) -> tuple[int, int] | None:
    """The ids whose `Store.message_numbers` name `job`'s range (`job_label`): the one before
    its first, and its last; None for a job with no range (a major fold).

    A job folds the conversation's messages whose ids run from its first to its last, and its
    first need not be one of them: the rest of a range too large for one call is queued from
    the id after the chapter's last, which may be another conversation's message (ids
    interleave when the user goes between chats) or a deleted one. `message_numbers` counts
    the conversation's messages up to an id, so the one before the first counts those before
    the range."""
    if job.first_message_id is None or job.last_message_id is None:
        return None
    return job.first_message_id - 1, job.last_message_id


def job_label(job: FoldJob, numbers: Mapping[int, int]) -> str:
    """A fold job as a person knows it: its kind and the range it folds, numbered as the chat
    numbers messages, "chapter #5-#9" or "refold #36-#38"; a major fold has no range (it takes
    the oldest chapters when it runs), so "major fold". `numbers`: `Store.message_numbers` of
    `job_ends` (among others). Never its store id, which reads as a message number (and no
    command takes it). A range `numbers` cannot name (a view read before the job was queued,
    or no message of the conversation left in it) is not said: the kind alone."""
    ends = job_ends(job)
    if ends is None or ends[0] not in numbers or ends[1] not in numbers:
        return job.kind.label
    first, last = numbers[ends[0]] + 1, numbers[ends[1]]
    if first > last:
        return job.kind.label
    return f"{job.kind.label} {chapter_span((first, last))}"


def job_numbers(store: Store, conv_id: int, jobs: Iterable[FoldJob]) -> dict[int, int]:
    """The numbers `job_label` names `jobs` of conversation `conv_id` by (one read)."""
    ends = [i for j in jobs if (span := job_ends(j)) is not None for i in span]
    return store.message_numbers(conv_id, ends) if ends else {}


def told(store: Store, event: FoldProgress) -> FoldProgress:
    """`event` as a person reads it: the job named by `job_label`, and its detail (what
    landed, why it failed) naming messages as the chat numbers them (the job's stored error
    keeps the store ids it was written with)."""
    conv_id = event.conversation_id
    label = job_label(event.job, job_numbers(store, conv_id, [event.job]))
    return replace(event, label=label, detail=numbered(store, conv_id, event.detail))
