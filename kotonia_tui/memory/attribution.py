"""Who did, said and knows what (issue 31): a group's memory read per speaker.

Every structured chapter item and every ledger entry names the messages it rests on, and each
message its speaker, so an item belongs to whoever spoke the lines it cites; what one member
said stays that member's, and a member who never spoke it is not shown as knowing it. A ledger
entry whose subject names a speaker but rests on someone else's lines is said *about* them.
Prose chapters (written before structured ones) cite no lines: they are counted, not shared out.
Pure: takes the stored rows, reads nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kotonia_tui.domain import StoredChapter, StoredLedgerEntry, StoredMessage


@dataclass(frozen=True)
class Attributed:
    """One item of memory: what it says, what kind it is, where it came from."""

    kind: str  # "event", "claim", or the ledger kind as a user reads it
    text: str
    evidence: tuple[int, ...]  # message ids
    chapter_id: int | None
    label: str = ""  # a ledger entry's label ("F12"); "" for a chapter item
    ended: bool = False  # a ledger entry a later chapter resolved or superseded


@dataclass
class SpeakerMemory:
    """What the memory holds of one speaker: the items resting on their lines, the entries
    about them resting on others' lines, and how many of their lines the memory cites."""

    name: str
    player: bool = False  # the persona (the user), not a cast member
    said: list[Attributed] = field(default_factory=list)
    about: list[Attributed] = field(default_factory=list)
    cited_lines: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class CastMemory:
    speakers: list[SpeakerMemory]
    prose_chapters: int  # chapters with no structure: nothing in them names its lines
    # The items' chapters -> the numbers of their first and last messages in the conversation,
    # () when none is left (the page names a chapter so, as the inspector does:
    # chat/numbering.py).
    chapter_numbers: Mapping[int, tuple[int, ...]] = field(default_factory=dict)


def chapter_items(chapter: StoredChapter) -> list[Attributed]:
    """A structured chapter's events and claims (its ledger items are the ledger's rows)."""
    if not chapter.structure:
        return []
    try:
        data = json.loads(chapter.structure)
    except ValueError:
        return []
    items = []
    for kind, rows in (("event", data.get("events", [])), ("claim", data.get("claims", []))):
        for row in rows:
            text = str(row.get("text", "")).strip()
            ids = tuple(i for i in row.get("ids", []) if isinstance(i, int))
            if text:
                items.append(Attributed(kind, text, ids, chapter.id))
    return items


def cast_memory(
    names: Sequence[str],
    player: str,
    chapters: Sequence[StoredChapter],
    ledger: Sequence[StoredLedgerEntry],
    cited: Mapping[int, StoredMessage],
    chapter_numbers: Mapping[int, tuple[int, ...]] | None = None,
) -> CastMemory:
    """Each of `names` (the cast, in its order) and the `player`, with the items resting on
    their lines; `cited` holds the messages the items cite (a deleted one is missing, and its
    item belongs to nobody it does not name). Someone else who spoke cited lines (a member who
    left the cast) is listed after them. `chapter_numbers`: the chapters' ranges in message
    numbers, kept for the page."""
    speakers: dict[str, SpeakerMemory] = {n: SpeakerMemory(n) for n in names}
    speakers.setdefault(player, SpeakerMemory(player, player=True))

    def of(name: str) -> SpeakerMemory:
        if name not in speakers:
            speakers[name] = SpeakerMemory(name)
        return speakers[name]

    def share(item: Attributed, subject: str = "") -> None:
        by: list[str] = []
        for message_id in item.evidence:
            message = cited.get(message_id)
            if message is not None and message.speaker.strip():
                name = message.speaker.strip()
                of(name).cited_lines.add(message_id)
                if name not in by:
                    by.append(name)
        for name in by:
            of(name).said.append(item)
        if subject and subject in speakers and subject not in by:
            speakers[subject].about.append(item)

    live = [c for c in chapters if c.superseded_by is None]
    for chapter in live:
        for item in chapter_items(chapter):
            share(item)
    for entry in ledger:
        share(
            Attributed(
                entry.kind.label,
                entry.text,
                tuple(entry.evidence),
                entry.chapter_id,
                label=entry.label,
                ended=entry.ended_by_chapter_id is not None,
            ),
            entry.subject.strip(),
        )
    return CastMemory(
        list(speakers.values()),
        sum(1 for c in live if not c.structure and c.text.strip()),
        dict(chapter_numbers or {}),
    )
