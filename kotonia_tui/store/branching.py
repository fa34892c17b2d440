"""Branching a conversation: a new one that shares the story up to a message, memory included.

The branch gets copies of the messages (with their versions and cached token counts), of the
chapters and synopsis versions that cover only those messages, of the ledger entries those
chapters wrote, and of the memory state. Copies, not shared rows: what happens in one branch
afterwards (a refold after an edit, a new chapter ending an entry, a major fold) never reaches
the other, so memory is never mixed across branches.

Message ids are global, and chapters, synopses and the memory state point at messages by id
range. The copies get new ids in the same order as the originals, numbered densely over every
id the copied rows mention (the messages and the ends of the chapter ranges, even a message
deleted since), so each range holds exactly the copies of the messages it held.

The memory's texts cite messages by id too (a quoted line's label, an item's evidence, a note's
range: memory/numbering.py): the copies of the chapters, the synopsis versions and the memory
block cite the copies, as their ranges do, so the branch's memory speaks of its own messages
(copied byte for byte, they named the original's, and the branch showed and sent those ids).
The rewrite is the memory's (`retarget`, given by the caller: the store holds no memory logic);
without it the texts are copied as they are. So is the rewrite of the evidence ids in a
chapter's `structure` (`restructure`), which the cast-memory page numbers.

The ledger comes with the chapters that wrote it: an entry of a copied chapter (live or taken
into the synopsis: a major fold never ends an entry) is copied in id order, written by the
chapter's copy, its evidence and texts citing the copies (an id with no copy stays as the
texts leave it). An end recorded by a copied chapter is kept, by its copy; an end recorded by
a chapter past the branch point did not happen in the branch, where the entry is live. Entries
of chapters past the branch point are not copied. A copy keeps its original's label
(`label_number`: "T7" stays T7 though its id is new): the copied memory block and chapters name
entries by label ("Resolved: T7"), a later chapter of the branch ends them by it, and the
block's ledger lines are then the copies' own lines, which is how the inspector knows the
prompt carries them. Labels stay unique within a conversation: a copy's label is an older
row's id, and a new entry's label is its own id, larger than every id in the table.

The memory block the prompt carries (`memory_state.memory_text`) is copied when it covers only
shared messages: the prompt numbers messages per conversation, and the copies hold the places
the originals hold, so the branch's next prompt starts with exactly the bytes the original's
did (its ledger lines included: same labels, same numbers), and the engine reuses that prefix
from its KV cache instead of reading it again. When the applied memory reaches past the branch
point, the branch starts from the chapters it does share, which its next turn applies with
their ledger entries (one new prefix, as after any fold).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from kotonia_tui.domain import (
    Conversation,
    FoldJob,
    FoldKind,
    Role,
    StoredConversation,
    utcnow,
)
from kotonia_tui.store import cast, conversations, fold_jobs, memory_rows
from kotonia_tui.store.codec import ts_to_db
from kotonia_tui.store.connection import Db
from kotonia_tui.store.errors import NotFoundError, StoreError
from kotonia_tui.store.messages import next_message_id
from kotonia_tui.store.records import MemoryState

_MESSAGE_FIELDS = (
    "role, speaker, text, scene_date, segments, images, created_at, edited, status, "
    "status_reason, reasoning, chosen, extra, character_key"
)
_ALTERNATIVE_FIELDS = "idx, text, segments, status, status_reason, reasoning, created_at, extra"

# Rewrites a memory text's message references by a mapping {old id: new id}, given each old
# id's speaker (memory/numbering.py `renumber`, which reads a label as one only when it names
# its message's speaker).
Retarget = Callable[[str, Mapping[int, int], Mapping[int, str]], str]
# Rewrites a chapter's `structure` (its items' evidence ids) by the same mapping
# (memory/structured.py `retarget_structure`: the structure's shape is the memory's).
Restructure = Callable[[str, Mapping[int, int]], str]


@dataclass(frozen=True)
class _Texts:
    """Memory texts and evidence as the branch's copies hold them: citing the copies' ids."""

    retarget: Retarget | None = None
    restructure: Restructure | None = None
    to_new: dict[int, int] = field(default_factory=dict)
    speakers: dict[int, str] = field(default_factory=dict)

    def __call__(self, text: str) -> str:
        if self.retarget is None or not text:
            return text
        return self.retarget(text, self.to_new, self.speakers)

    def structure(self, structure: str | None) -> str | None:
        if self.restructure is None or not structure:
            return structure
        return self.restructure(structure, self.to_new)

    def ids(self, ids: Iterable[int]) -> list[int]:
        """Evidence ids (a ledger entry's) citing the copies. An id with no copy (a message
        deleted since that ends no range) stays as it is, as `retarget` leaves it in a text:
        so an entry's line in the copied memory block is the copy's own line (`carried`)."""
        return [self.to_new.get(i, i) for i in ids]


@dataclass(frozen=True)
class Branched:
    """A new branch and how its memory came over."""

    conversation: StoredConversation
    messages: int
    chapters: int  # chapters copied (live and folded ones, for the audit trail too)
    synopses: int
    ledger_entries: int  # ledger entries the copied chapters wrote (ended ones too)
    memory_shared: bool  # the prompt's memory block was copied byte for byte
    refolds: int  # refold jobs queued for chapters an edit had made stale


def branch_conversation(
    db: Db,
    source_id: int,
    through_id: int | None,
    conv: Conversation,
    retarget: Retarget | None = None,
    restructure: Restructure | None = None,
) -> Branched:
    """A new conversation (`conv`'s fields) sharing the source's messages up to and including
    `through_id` (None: all of them), with the memory that covers them, its texts citing the
    copies (`retarget`; None: copied as they are), and so the evidence ids in its chapters'
    structures (`restructure`; None: copied as they are). One transaction."""
    with db.write():
        source = conversations.get_conversation(db, source_id)
        last = _last_id(db, source.id)
        through = last if through_id is None else through_id
        if through_id is not None:
            row = db.select_one(
                "SELECT 1 FROM messages WHERE id = ? AND conversation_id = ?",
                (through_id, source.id),
            )
            if row is None:
                raise NotFoundError(f"message {through_id} is not in conversation {source.id}")
        created = conversations.insert_conversation(db, conv)
        state = memory_rows.memory_state(db, source.id)
        _map_ids(db, source.id, through, state)
        texts = _texts(db, retarget, restructure)
        count = _copy_messages(db, source.id, created.id, through)
        db.execute("UPDATE conversations SET message_count = ? WHERE id = ?", (count, created.id))
        synopsis_ids, synopsis_through = _copy_synopses(db, source.id, created.id, through, texts)
        chapter_ids, stale = _copy_chapters(
            db, source.id, created.id, through, synopsis_through, texts
        )
        entries = _copy_ledger(db, source.id, created.id, chapter_ids, texts)
        shared = _copy_state(db, state, created.id, through, chapter_ids, synopsis_ids, texts)
        _copy_settings(db, source.id, created.id)
        cast.copy_cast(db, source.id, created.id)
        if not shared:
            _fresh_state(db, created.id, synopsis_through)
        for first, last_id in stale:
            fold_jobs.enqueue_fold(
                db,
                FoldJob(
                    conversation_id=created.id,
                    kind=FoldKind.REFOLD,
                    first_message_id=first,
                    last_message_id=last_id,
                ),
            )
        db.execute("DROP TABLE temp.branch_ids")
        return Branched(
            conversations.get_conversation(db, created.id),
            count,
            len(chapter_ids),
            len(synopsis_ids),
            entries,
            shared,
            len(stale),
        )


def _copy_settings(db: Db, source_id: int, conv_id: int) -> None:
    """The branch plays on with the source's settings: generation, Author's Note and its
    depth, the World Info attached, the lore budget (SillyTavern carries chat metadata too)."""
    db.execute(
        """INSERT INTO conversation_settings (conversation_id, settings, updated_at)
           SELECT ?, settings, ? FROM conversation_settings WHERE conversation_id = ?""",
        (conv_id, ts_to_db(utcnow()), source_id),
    )


def _last_id(db: Db, conv_id: int) -> int:
    row = db.select_one("SELECT max(id) AS top FROM messages WHERE conversation_id = ?", (conv_id,))
    return int(row["top"]) if row is not None and row["top"] is not None else 0


def _map_ids(db: Db, source_id: int, through: int, state: MemoryState) -> None:
    """Number the new ids in a temp table (old -> new) that the copies join on."""
    base = next_message_id(db) - 1
    db.execute("DROP TABLE IF EXISTS temp.branch_ids")
    db.execute("CREATE TEMP TABLE branch_ids (old INTEGER PRIMARY KEY, new INTEGER NOT NULL)")
    extra = [i for i in (state.verbatim_start_id, state.forced_cut_through_id) if i is not None]
    extra = [i for i in extra if i <= through]
    marks = " UNION ".join("SELECT ?" for _ in extra)
    db.execute(
        f"""INSERT INTO temp.branch_ids (old, new)
            SELECT old, ? + row_number() OVER (ORDER BY old) FROM (
                SELECT id AS old FROM messages WHERE conversation_id = ? AND id <= ?
                UNION SELECT first_message_id FROM chapters
                    WHERE conversation_id = ? AND last_message_id <= ?
                UNION SELECT last_message_id FROM chapters
                    WHERE conversation_id = ? AND last_message_id <= ?
                UNION SELECT through_message_id FROM synopses
                    WHERE conversation_id = ? AND through_message_id <= ?
                {"UNION " + marks if extra else ""}
            )""",
        (
            base,
            source_id,
            through,
            source_id,
            through,
            source_id,
            through,
            source_id,
            through,
            *extra,
        ),
    )
    top = db.select_one("SELECT max(new) AS top FROM temp.branch_ids")
    if top is not None and top["top"] is not None:
        # Ids no message took (ends of ranges whose message was deleted) stay unused: the
        # conversation's next message comes after all of them.
        db.execute(
            """INSERT INTO sqlite_sequence (name, seq) SELECT 'messages', ?
               WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'messages')""",
            (top["top"],),
        )
        db.execute(
            "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'messages'", (top["top"],)
        )


def _texts(db: Db, retarget: Retarget | None, restructure: Restructure | None) -> _Texts:
    """Every copied id (old -> new) and the speaker of each copied message, for `retarget`,
    `restructure` and the ledger's evidence (an id column, mapped as the ranges are)."""
    rows = db.select(
        """SELECT b.old, b.new, m.speaker FROM temp.branch_ids b
           LEFT JOIN messages m ON m.id = b.old"""
    )
    return _Texts(
        retarget,
        restructure,
        {int(r["old"]): int(r["new"]) for r in rows},
        {int(r["old"]): str(r["speaker"]) for r in rows if r["speaker"] is not None},
    )


def _new_id(db: Db, old: int) -> int:
    row = db.select_one("SELECT new FROM temp.branch_ids WHERE old = ?", (old,))
    if row is None:
        raise StoreError(f"message {old} was not copied into the branch")
    return int(row["new"])


def _copy_messages(db: Db, source_id: int, new_id: int, through: int) -> int:
    where = "m.conversation_id = ? AND m.id <= ?"
    cursor = db.execute(
        f"""INSERT INTO messages (id, conversation_id, {_MESSAGE_FIELDS})
            SELECT b.new, ?, {", ".join("m." + f.strip() for f in _MESSAGE_FIELDS.split(","))}
            FROM messages m JOIN temp.branch_ids b ON b.old = m.id WHERE {where}""",
        (new_id, source_id, through),
    )
    fields = ", ".join("a." + f.strip() for f in _ALTERNATIVE_FIELDS.split(","))
    db.execute(
        f"""INSERT INTO alternatives (message_id, {_ALTERNATIVE_FIELDS})
            SELECT b.new, {fields} FROM alternatives a
            JOIN messages m ON m.id = a.message_id JOIN temp.branch_ids b ON b.old = m.id
            WHERE {where}""",
        (source_id, through),
    )
    # The counts come too: the branch's next turn counts nothing it shares.
    db.execute(
        f"""INSERT INTO token_counts (message_id, model_key, tokens)
            SELECT b.new, t.model_key, t.tokens FROM token_counts t
            JOIN messages m ON m.id = t.message_id JOIN temp.branch_ids b ON b.old = m.id
            WHERE {where}""",
        (source_id, through),
    )
    return int(cursor.rowcount)


def _copy_synopses(
    db: Db, source_id: int, new_id: int, through: int, texts: _Texts
) -> tuple[dict[int, int], int]:
    """The synopsis versions that cover only shared messages (oldest first, stopping at the
    first that reaches past the branch point); the last one copied is current.
    Returns old id -> new id, and the message the branch's current synopsis covers through."""
    copied: dict[int, int] = {}
    newest = 0
    versions = memory_rows.synopsis_versions(db, source_id)
    kept = []
    for synopsis in versions:
        if synopsis.through_message_id > through:
            break
        kept.append(synopsis)
    for index, synopsis in enumerate(kept):
        # Every column as the original has it (origin, target, what was left out, stale):
        # a branch's memory is the original's up to the branch point.
        copy = synopsis.model_copy(
            update={
                "current": index == len(kept) - 1,
                "text": texts(synopsis.text),
                "dropped": tuple(texts(sentence) for sentence in synopsis.dropped),
            }
        )
        copied[synopsis.id] = db.insert(
            "synopses",
            memory_rows.synopsis_row(
                copy, new_id, synopsis.version, _new_id(db, synopsis.through_message_id)
            ),
        )
        newest = synopsis.through_message_id
    return copied, newest


def _copy_chapters(
    db: Db, source_id: int, new_id: int, through: int, synopsis_through: int, texts: _Texts
) -> tuple[dict[int, int], list[tuple[int, int]]]:
    """Every chapter whose range ends at or before the branch point, in the original order
    (so the newest stays the newest), with refolds pointing at their copies. A chapter the
    original's synopsis took in stays taken in only if the branch's synopsis covers it.
    Returns old id -> new id, and the (new) ranges of stale chapters to refold (a retired
    one's only when its range holds a message of the story again)."""
    rows = db.select(
        "SELECT * FROM chapters WHERE conversation_id = ? AND last_message_id <= ? ORDER BY id",
        (source_id, through),
    )
    copied: dict[int, int] = {}
    for row in rows:
        chapter = memory_rows.chapter_from_row(row)
        copied[chapter.id] = memory_rows.insert_chapter(
            db,
            chapter.model_copy(
                update={
                    "id": None,
                    "conversation_id": new_id,
                    "first_message_id": _new_id(db, chapter.first_message_id),
                    "last_message_id": _new_id(db, chapter.last_message_id),
                    "text": texts(chapter.text),
                    "note": texts(chapter.note),
                    "structure": texts.structure(chapter.structure),
                    "in_synopsis": chapter.in_synopsis
                    and chapter.last_message_id <= synopsis_through,
                }
            ),
        ).id
    stale: list[tuple[int, int]] = []
    for row in rows:
        new = copied[row["id"]]
        successor = copied.get(row["superseded_by"]) if row["superseded_by"] else None
        if successor is not None:
            db.execute("UPDATE chapters SET superseded_by = ? WHERE id = ?", (successor, new))
        elif row["stale"]:
            first, last = _new_id(db, row["first_message_id"]), _new_id(db, row["last_message_id"])
            # A retired chapter is copied retired, and refolded only when its range holds a
            # message of the story again (a deletion undone: its refold may still be waiting
            # in the original); otherwise its messages are gone and there is nothing to fold.
            if not row["retired"] or _holds_story(db, new_id, first, last):
                stale.append((first, last))
    return copied, stale


def _holds_story(db: Db, conv_id: int, first: int, last: int) -> bool:
    """Whether messages `first`..`last` of the conversation hold one that is part of the story
    (not an imported note: `memory.assembly.in_prompt`), as a refold would fold."""
    row = db.select_one(
        """SELECT 1 FROM messages WHERE conversation_id = ? AND id BETWEEN ? AND ?
               AND role != ? LIMIT 1""",
        (conv_id, first, last, Role.SYSTEM.value),
    )
    return row is not None


def _copy_ledger(
    db: Db, source_id: int, new_id: int, chapter_ids: dict[int, int], texts: _Texts
) -> int:
    """The ledger entries the copied chapters wrote (a chapter the synopsis took in too: a
    major fold never ends an entry), written by the chapters' copies, citing the copies, under
    the originals' labels. In id order, so the branch's ledger renders, fits and leaves the
    prompt in the original's order. An end recorded by a copied chapter stays, by its copy; an
    end recorded by a chapter past the branch point did not happen in the branch, so that
    entry is live there. Returns how many were copied."""
    rows = db.select("SELECT * FROM ledger WHERE conversation_id = ? ORDER BY id", (source_id,))
    copies: list[dict[str, object]] = []
    for row in rows:
        chapter = chapter_ids.get(row["chapter_id"])
        if chapter is None:
            continue  # written by a chapter past the branch point
        ended_by = chapter_ids.get(row["ended_by_chapter_id"] or 0)
        label = row["label_number"]
        copies.append(
            {
                "conversation_id": new_id,
                "kind": row["kind"],
                "text": texts(row["text"]),
                "subject": row["subject"],
                "evidence": json.dumps(texts.ids(json.loads(row["evidence"]))),
                "chapter_id": chapter,
                "ended_by_chapter_id": ended_by,
                "end_kind": row["end_kind"] if ended_by is not None else None,
                "end_note": texts(row["end_note"]) if ended_by is not None else "",
                "created_at": row["created_at"],
                "source": row["source"],
                # Its label stays the original's: the copied memory block and chapters name it
                # so, and a later chapter of the branch resolves or replaces it by that label.
                "label_number": row["id"] if label is None else label,
            }
        )
    db.insert_rows("ledger", copies)
    return len(copies)


def _applied_reach(db: Db, state: MemoryState) -> int:
    """The last message the memory block the prompt carries can speak of (0: none).

    Chapters are written oldest range first, so every chapter up to the applied one (a refold
    covers an older range) ends at or before the applied memory's end."""
    reach = 0
    if state.applied_chapter_id is not None:
        row = db.select_one(
            """SELECT max(last_message_id) AS top FROM chapters
               WHERE conversation_id = ? AND id <= ?""",
            (state.conversation_id, state.applied_chapter_id),
        )
        reach = int(row["top"]) if row is not None and row["top"] is not None else 0
    if state.applied_synopsis_id is not None:
        synopsis = db.select_one(
            "SELECT through_message_id FROM synopses WHERE id = ?", (state.applied_synopsis_id,)
        )
        if synopsis is not None:
            reach = max(reach, int(synopsis["through_message_id"]))
    return reach


def _copy_state(
    db: Db,
    state: MemoryState,
    new_id: int,
    through: int,
    chapter_ids: dict[int, int],
    synopsis_ids: dict[int, int],
    texts: _Texts,
) -> bool:
    """The original's memory state, when what it carries is all shared: its block citing the
    copies (the prompt shows the same numbers)."""
    if state.updated_at is None:
        return False  # never saved: the branch starts from the default too
    if _applied_reach(db, state) > through:
        return False
    if state.verbatim_start_id is not None and state.verbatim_start_id > through:
        return False  # the branch point was cut from the prompt: the branch starts afresh
    if state.applied_chapter_id is not None and state.applied_chapter_id not in chapter_ids:
        return False
    if state.applied_synopsis_id is not None and state.applied_synopsis_id not in synopsis_ids:
        return False

    def new(old: int | None) -> int | None:
        return None if old is None else _new_id(db, old)

    memory_rows.set_memory_state(
        db,
        state.model_copy(
            update={
                "conversation_id": new_id,
                "memory_text": texts(state.memory_text),
                "verbatim_start_id": new(state.verbatim_start_id),
                "forced_cut_through_id": new(state.forced_cut_through_id),
                "applied_chapter_id": chapter_ids.get(state.applied_chapter_id or 0),
                "applied_synopsis_id": synopsis_ids.get(state.applied_synopsis_id or 0),
            }
        ),
    )
    return True


def _fresh_state(db: Db, new_id: int, synopsis_through: int) -> None:
    """A branch whose prompt cannot repeat the original's: the verbatim window starts after
    what its own chapters and synopsis cover, and its next turn applies them."""
    row = db.select_one(
        """SELECT max(last_message_id) AS top FROM chapters
           WHERE conversation_id = ? AND superseded_by IS NULL AND retired = 0""",
        (new_id,),
    )
    covered = int(row["top"]) if row is not None and row["top"] is not None else 0
    if synopsis_through:
        covered = max(covered, _new_id(db, synopsis_through))
    if covered == 0:
        return  # nothing folded in the shared part: the default state is right
    after = db.select_one(
        "SELECT min(id) AS first FROM messages WHERE conversation_id = ? AND id > ?",
        (new_id, covered),
    )
    # No message after the memory: the window starts with the next one written.
    start = int(after["first"]) if after is not None and after["first"] is not None else None
    memory_rows.set_memory_state(
        db, MemoryState(conversation_id=new_id, verbatim_start_id=start or covered + 1)
    )
