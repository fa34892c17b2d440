"""Memory text as it is read: message references numbered per conversation, from the store.

The memory's stored text cites messages by store id (memory/numbering.py says why and what a
reference is); the turn's prompt, the inspector, `kotonia memory` and the notices a user reads
number them as the chat does. This asks the store for exactly the messages a text cites (their
numbers and speakers; ids of no message of the conversation are not found, so stay as they
are) and rewrites the text with them.

A chapter is named the same way, by its range in those numbers ("#309-#316", as in "from
#309-#316"), never by its store id: the id is shown nowhere else, differs between a branch and
its source, and reads as a message number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kotonia_tui.domain import StoredChapter, StoredFoldJob, StoredLedgerEntry, StoredSynopsis
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
