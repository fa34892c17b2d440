"""Messages with their alternatives (regenerated replies / swipes) and cached token counts.

A message row holds the chosen version (text, segments, status, reasoning) so the per-turn reads
need no join. Alternative rows exist only once a message has more than one version; then they
hold every version, including the chosen one, and the two are kept equal in each transaction.
Any change of a message's text drops its cached token counts: a stale count is worse than none.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence

from kotonia_tui import story_dates
from kotonia_tui.domain import (
    Alternative,
    Message,
    MessageStatus,
    Role,
    Segment,
    StoredMessage,
    utcnow,
)
from kotonia_tui.store import conversations
from kotonia_tui.store.codec import (
    dict_from_db,
    json_to_db,
    segments_from_db,
    segments_to_db,
    stored_as,
    strings_from_db,
    ts_from_db,
    ts_to_db,
)
from kotonia_tui.store.connection import Db, is_sqlite_int
from kotonia_tui.store.errors import NotFoundError, StoreError

_IN_CHUNK = 500  # ids per `IN (...)` list; far below SQLite's parameter limit
_MESSAGE_COLUMNS = (
    "id, conversation_id, role, speaker, text, segments, images, created_at, edited, status, "
    "status_reason, reasoning, chosen, extra, character_key"
)


# Validation and row building ----------------------------------------------------------------


def _describe(msg: Message) -> str:
    if msg.id is not None:
        return f"message {msg.id}"
    return f"message by {msg.speaker!r} at {msg.created_at.isoformat()}"


def validate_message(msg: Message) -> None:
    """The chosen alternative must be the message's own text, segments and status."""
    if not msg.alternatives:
        if msg.chosen != 0:
            raise StoreError(f"{_describe(msg)}: chosen is {msg.chosen} but it has no alternatives")
        return
    if not 0 <= msg.chosen < len(msg.alternatives):
        raise StoreError(
            f"{_describe(msg)}: chosen is {msg.chosen} but it has {len(msg.alternatives)} "
            "alternatives"
        )
    alt = msg.alternatives[msg.chosen]
    for field in ("text", "segments", "status"):
        if getattr(alt, field) != getattr(msg, field):
            raise StoreError(
                f"{_describe(msg)}: its {field} differs from alternative {msg.chosen}, "
                "the chosen one; they must be equal"
            )


def _message_row(msg: Message, conv_id: int, msg_id: int) -> dict[str, object]:
    what = _describe(msg)
    return {
        "id": msg_id,
        "conversation_id": conv_id,
        "role": msg.role.value,
        "speaker": msg.speaker,
        "text": msg.text,
        "scene_date": story_dates.scene_date(msg.text),
        "segments": segments_to_db(msg.segments),
        "images": json_to_db(msg.images, f"{what} images"),
        "created_at": ts_to_db(msg.created_at),
        "edited": int(msg.edited),
        "status": msg.status.value,
        "status_reason": msg.status_reason,
        "reasoning": msg.reasoning,
        "chosen": msg.chosen,
        "extra": json_to_db(msg.extra, f"{what} extra"),
        "character_key": msg.character_key,
    }


def _alternative_row(msg_id: int, idx: int, alt: Alternative) -> dict[str, object]:
    return {
        "message_id": msg_id,
        "idx": idx,
        "text": alt.text,
        "segments": segments_to_db(alt.segments),
        "status": alt.status.value,
        "status_reason": alt.status_reason,
        "reasoning": alt.reasoning,
        "created_at": ts_to_db(alt.created_at),
        "extra": json_to_db(alt.extra, f"message {msg_id} alternative {idx} extra"),
    }


def _check_images(db: Db, messages: Sequence[Message]) -> None:
    wanted = sorted({h for msg in messages for h in msg.images})
    if not wanted:
        return
    found: set[str] = set()
    for start in range(0, len(wanted), _IN_CHUNK):
        chunk = wanted[start : start + _IN_CHUNK]
        marks = ",".join("?" * len(chunk))
        found.update(
            row["hash"]
            for row in db.select(f"SELECT hash FROM images WHERE hash IN ({marks})", chunk)
        )
    missing = [h for h in wanted if h not in found]
    if missing:
        raise StoreError(
            f"message refers to image {missing[0]} which is not stored; put_image first"
        )


def next_message_id(db: Db) -> int:
    # Both sources, because AUTOINCREMENT's sequence row only exists after the first insert.
    row = db.select_one(
        """SELECT max(ifnull((SELECT seq FROM sqlite_sequence WHERE name = 'messages'), 0),
                      ifnull((SELECT max(id) FROM messages), 0)) AS top"""
    )
    return int(row["top"] if row else 0) + 1


# Writes -------------------------------------------------------------------------------------


def insert_messages(db: Db, conv_id: int, messages: Sequence[Message]) -> list[int]:
    """Append messages in one transaction (bulk: one executemany per table); returns the ids."""
    for msg in messages:
        if msg.id is not None:
            raise StoreError(f"{_describe(msg)} already has an id; add it as a new message")
        if msg.conversation_id not in (None, conv_id):
            raise StoreError(
                f"{_describe(msg)} belongs to conversation {msg.conversation_id}, not {conv_id}"
            )
        validate_message(msg)
    if not messages:
        return []
    with db.write():
        conversations.touch(
            db, conv_id, max(m.created_at for m in messages), count_delta=len(messages)
        )
        _check_images(db, messages)
        # Ids are assigned here, under the write lock, so alternatives and token counts can be
        # inserted in bulk too (sqlite's executemany does not report each row's id).
        first = next_message_id(db)
        ids = list(range(first, first + len(messages)))
        db.insert_rows(
            "messages", [_message_row(m, conv_id, i) for m, i in zip(messages, ids, strict=True)]
        )
        alt_rows = [
            _alternative_row(i, idx, alt)
            for m, i in zip(messages, ids, strict=True)
            for idx, alt in enumerate(m.alternatives)
        ]
        if alt_rows:
            db.insert_rows("alternatives", alt_rows)
        token_rows = [
            {"message_id": i, "model_key": key, "tokens": n}
            for m, i in zip(messages, ids, strict=True)
            for key, n in m.token_counts.items()
        ]
        if token_rows:
            db.insert_rows("token_counts", token_rows)
    return ids


def add_message(db: Db, msg: Message) -> StoredMessage:
    if msg.conversation_id is None:
        raise StoreError(f"{_describe(msg)} has no conversation_id")
    (new_id,) = insert_messages(db, msg.conversation_id, [msg])
    return stored_as(StoredMessage, msg, id=new_id)


def _message_row_or_raise(db: Db, msg_id: int) -> sqlite3.Row:
    row = db.select_one(f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE id = ?", (msg_id,))
    if row is None:
        raise NotFoundError(f"message {msg_id} does not exist in {db.path}")
    return row


def _alternative_count(db: Db, msg_id: int) -> int:
    row = db.select_one("SELECT count(*) AS n FROM alternatives WHERE message_id = ?", (msg_id,))
    return int(row["n"]) if row else 0


def _set_version(
    db: Db,
    row: sqlite3.Row,
    *,
    text: str,
    segments: list[Segment],
    status: MessageStatus,
    status_reason: str | None,
    reasoning: str | None,
    edited: bool | None = None,
    chosen: int | None = None,
) -> None:
    """Write the chosen version onto the message and its alternative row, drop token counts."""
    msg_id = row["id"]
    chosen_idx = row["chosen"] if chosen is None else chosen
    seg_json = segments_to_db(segments)
    db.execute(
        """UPDATE messages SET text = ?, scene_date = ?, segments = ?, status = ?,
               status_reason = ?, reasoning = ?, edited = ?, chosen = ? WHERE id = ?""",
        (
            text,
            story_dates.scene_date(text),
            seg_json,
            status.value,
            status_reason,
            reasoning,
            row["edited"] if edited is None else int(edited),
            chosen_idx,
            msg_id,
        ),
    )
    db.execute(
        """UPDATE alternatives SET text = ?, segments = ?, status = ?, status_reason = ?,
               reasoning = ? WHERE message_id = ? AND idx = ?""",
        (text, seg_json, status.value, status_reason, reasoning, msg_id, chosen_idx),
    )
    db.execute("DELETE FROM token_counts WHERE message_id = ?", (msg_id,))
    conversations.touch(db, row["conversation_id"], utcnow())


def update_message_text(
    db: Db, msg_id: int, text: str, segments: list[Segment], edited: bool = True
) -> StoredMessage:
    with db.write():
        row = _message_row_or_raise(db, msg_id)
        _set_version(
            db,
            row,
            text=text,
            segments=segments,
            status=MessageStatus(row["status"]),
            status_reason=row["status_reason"],
            reasoning=row["reasoning"],
            edited=edited,
        )
        return get_message(db, msg_id)


def finish_message(
    db: Db,
    msg_id: int,
    text: str,
    segments: list[Segment],
    status: MessageStatus,
    status_reason: str | None = None,
    reasoning: str | None = None,
) -> StoredMessage:
    with db.write():
        _set_version(
            db,
            _message_row_or_raise(db, msg_id),
            text=text,
            segments=segments,
            status=status,
            status_reason=status_reason,
            reasoning=reasoning,
        )
        return get_message(db, msg_id)


def add_alternative(db: Db, msg_id: int, alt: Alternative, choose: bool = True) -> int:
    with db.write():
        row = _message_row_or_raise(db, msg_id)
        count = _alternative_count(db, msg_id)
        if count == 0:
            # The message's single version becomes alternative 0 before the new one joins it.
            first = Alternative(
                text=row["text"],
                segments=segments_from_db(row["segments"]),
                status=MessageStatus(row["status"]),
                status_reason=row["status_reason"],
                reasoning=row["reasoning"],
                created_at=ts_from_db(row["created_at"]),
            )
            db.insert("alternatives", _alternative_row(msg_id, 0, first))
            count = 1
        db.insert("alternatives", _alternative_row(msg_id, count, alt))
        if choose:
            _choose(db, row, count)
        return count


def _choose(db: Db, row: sqlite3.Row, index: int) -> None:
    msg_id = row["id"]
    alt_row = db.select_one(
        "SELECT * FROM alternatives WHERE message_id = ? AND idx = ?", (msg_id, index)
    )
    if alt_row is None:
        count = _alternative_count(db, msg_id)
        raise StoreError(
            f"message {msg_id} has no alternative {index} (it has {max(count, 1)}: "
            f"0..{max(count, 1) - 1})"
        )
    _set_version(
        db,
        row,
        text=alt_row["text"],
        segments=segments_from_db(alt_row["segments"]),
        status=MessageStatus(alt_row["status"]),
        status_reason=alt_row["status_reason"],
        reasoning=alt_row["reasoning"],
        chosen=index,
    )


def choose_alternative(db: Db, msg_id: int, index: int) -> StoredMessage:
    with db.write():
        row = _message_row_or_raise(db, msg_id)
        single_version = _alternative_count(db, msg_id) == 0
        if not (single_version and index == 0):
            _choose(db, row, index)
        return get_message(db, msg_id)


def delete_message(db: Db, msg_id: int) -> None:
    """Removes the message with its alternatives and token counts; metrics keep a NULL id."""
    with db.write():
        row = _message_row_or_raise(db, msg_id)
        db.execute("DELETE FROM messages WHERE id = ?", (msg_id,))
        conversations.touch(db, row["conversation_id"], utcnow(), count_delta=-1)


def restore_message(db: Db, msg: StoredMessage) -> StoredMessage:
    """Put a deleted message back as it was, under its own id, so it takes its old place (and
    falls inside the chapter ranges it belonged to). Undoing a delete within a session."""
    validate_message(msg)
    with db.write():
        if db.select_one("SELECT 1 FROM messages WHERE id = ?", (msg.id,)) is not None:
            raise StoreError(f"message {msg.id} is already stored; it was not deleted")
        conversations.touch(db, msg.conversation_id, msg.created_at, count_delta=1)
        _check_images(db, [msg])
        db.insert_rows("messages", [_message_row(msg, msg.conversation_id, msg.id)])
        db.insert_rows(
            "alternatives",
            [_alternative_row(msg.id, idx, alt) for idx, alt in enumerate(msg.alternatives)],
        )
        db.insert_rows(
            "token_counts",
            [
                {"message_id": msg.id, "model_key": key, "tokens": n}
                for key, n in msg.token_counts.items()
            ],
        )
        return get_message(db, msg.id)


def set_token_count(db: Db, msg_id: int, model_key: str, tokens: int) -> None:
    if tokens < 0:
        raise StoreError(f"message {msg_id}: token count for {model_key!r} is {tokens}, below 0")
    with db.write():
        try:
            db.execute(
                """INSERT INTO token_counts (message_id, model_key, tokens) VALUES (?, ?, ?)
                   ON CONFLICT (message_id, model_key) DO UPDATE SET tokens = excluded.tokens""",
                (msg_id, model_key, tokens),
            )
        except sqlite3.IntegrityError as exc:
            raise NotFoundError(f"message {msg_id} does not exist in {db.path}") from exc


# Reads --------------------------------------------------------------------------------------


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(ids), _IN_CHUNK):
        yield ids[start : start + _IN_CHUNK]


def _hydrate(
    db: Db, rows: list[sqlite3.Row], model_key: str | None, all_keys: bool
) -> list[StoredMessage]:
    """Messages from rows, with their alternatives and token counts (one query per 500 ids)."""
    ids = [row["id"] for row in rows]
    alts: dict[int, list[Alternative]] = {}
    tokens: dict[int, dict[str, int]] = {}
    for chunk in _chunks(ids):
        marks = ",".join("?" * len(chunk))
        for alt in db.select(
            f"SELECT * FROM alternatives WHERE message_id IN ({marks}) ORDER BY message_id, idx",
            chunk,
        ):
            with db.decoding(f"message {alt['message_id']} version {alt['idx'] + 1}"):
                alts.setdefault(alt["message_id"], []).append(
                    Alternative(
                        text=alt["text"],
                        segments=segments_from_db(alt["segments"]),
                        status=MessageStatus(alt["status"]),
                        status_reason=alt["status_reason"],
                        reasoning=alt["reasoning"],
                        created_at=ts_from_db(alt["created_at"]),
                        extra=dict_from_db(alt["extra"]),
                    )
                )
        if all_keys or model_key is not None:
            sql = (
                "SELECT message_id, model_key, tokens FROM token_counts "
                f"WHERE message_id IN ({marks})"
            )
            params: list[object] = list(chunk)
            if not all_keys:
                sql += " AND model_key = ?"
                params.append(model_key)
            for tok in db.select(sql, params):
                tokens.setdefault(tok["message_id"], {})[tok["model_key"]] = tok["tokens"]
    messages = []
    for row in rows:
        with db.decoding(f"message {row['id']}"):
            messages.append(
                StoredMessage(
                    id=row["id"],
                    conversation_id=row["conversation_id"],
                    role=Role(row["role"]),
                    speaker=row["speaker"],
                    text=row["text"],
                    segments=segments_from_db(row["segments"]),
                    images=strings_from_db(row["images"]),
                    created_at=ts_from_db(row["created_at"]),
                    edited=bool(row["edited"]),
                    status=MessageStatus(row["status"]),
                    status_reason=row["status_reason"],
                    reasoning=row["reasoning"],
                    alternatives=alts.get(row["id"], []),
                    chosen=row["chosen"],
                    token_counts=tokens.get(row["id"], {}),
                    extra=dict_from_db(row["extra"]),
                    character_key=row["character_key"],
                )
            )
    return messages


def _query(
    db: Db,
    where: str,
    params: Sequence[object],
    order: str,
    limit: int | None,
    model_key: str | None,
) -> list[StoredMessage]:
    sql = f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE {where} ORDER BY {order}"
    if limit is not None:
        if limit < 0:
            raise StoreError(f"limit must be 0 or more, got {limit}")
        sql += f" LIMIT {int(limit)}"
    with db.read():
        rows = db.select(sql, params)
        return _hydrate(db, rows, model_key, all_keys=False)


def get_message(db: Db, msg_id: int) -> StoredMessage:
    """One message with its token counts for every model key."""
    with db.read():
        row = _message_row_or_raise(db, msg_id)
        return _hydrate(db, [row], None, all_keys=True)[0]


def last_message(db: Db, conv_id: int, model_key: str | None = None) -> StoredMessage | None:
    found = _query(db, "conversation_id = ?", (conv_id,), "id DESC", 1, model_key)
    return found[0] if found else None


def last_message_by(db: Db, conv_id: int, role: Role) -> StoredMessage | None:
    """The newest message of that role (the name the user goes by in the story)."""
    found = _query(
        db, "conversation_id = ? AND role = ?", (conv_id, role.value), "id DESC", 1, None
    )
    return found[0] if found else None


def recent_messages(
    db: Db, conv_id: int, limit: int, model_key: str | None = None
) -> list[StoredMessage]:
    found = _query(db, "conversation_id = ?", (conv_id,), "id DESC", limit, model_key)
    found.reverse()
    return found


def messages_from(
    db: Db, conv_id: int, first_id: int, limit: int, model_key: str | None = None
) -> list[StoredMessage]:
    return _query(
        db, "conversation_id = ? AND id >= ?", (conv_id, first_id), "id", limit, model_key
    )


def messages_between(
    db: Db, conv_id: int, first_id: int, last_id: int, model_key: str | None = None
) -> list[StoredMessage]:
    return _query(
        db,
        "conversation_id = ? AND id BETWEEN ? AND ?",
        (conv_id, first_id, last_id),
        "id",
        None,
        model_key,
    )


def messages_before(
    db: Db, conv_id: int, before_id: int, limit: int, model_key: str | None = None
) -> list[StoredMessage]:
    found = _query(
        db, "conversation_id = ? AND id < ?", (conv_id, before_id), "id DESC", limit, model_key
    )
    found.reverse()
    return found


def neighbours(
    db: Db, conv_id: int, ids: Iterable[int], before_id: int, model_key: str | None = None
) -> dict[int, tuple[StoredMessage | None, StoredMessage | None]]:
    """For each id, the message before it and the one after it in its conversation, both
    older than `before_id` (None where there is none): two indexed reads per id."""
    out: dict[int, tuple[StoredMessage | None, StoredMessage | None]] = {}
    for msg_id in ids:
        before = _query(
            db, "conversation_id = ? AND id < ?", (conv_id, msg_id), "id DESC", 1, model_key
        )
        out[msg_id] = (
            before[0] if before else None,
            _next(db, conv_id, msg_id, before_id, model_key),
        )
    return out


def next_messages(
    db: Db, conv_id: int, ids: Iterable[int], before_id: int, model_key: str | None = None
) -> dict[int, StoredMessage | None]:
    """For each id, the message after it in its conversation, older than `before_id` (None
    where there is none): one indexed read per id."""
    return {msg_id: _next(db, conv_id, msg_id, before_id, model_key) for msg_id in ids}


def _next(
    db: Db, conv_id: int, msg_id: int, before_id: int, model_key: str | None
) -> StoredMessage | None:
    after = _query(
        db,
        "conversation_id = ? AND id > ? AND id < ?",
        (conv_id, msg_id, before_id),
        "id",
        1,
        model_key,
    )
    return after[0] if after else None


def message_count(db: Db, conv_id: int) -> int:
    row = db.select_one("SELECT message_count FROM conversations WHERE id = ?", (conv_id,))
    if row is None:
        raise NotFoundError(f"conversation {conv_id} does not exist in {db.path}")
    return int(row["message_count"])


def message_numbers(db: Db, conv_id: int, ids: Iterable[int]) -> dict[int, int]:
    """Each id's place in its conversation (1 = the first message), for display.

    Counted over the (conversation_id, id) index from one id to the next, so the whole call
    reads as many index entries as the largest id's place, however many ids are asked for.
    """
    numbers: dict[int, int] = {}
    counted, previous = 0, 0
    for msg_id in sorted(set(ids)):
        row = db.select_one(
            "SELECT COUNT(*) AS n FROM messages WHERE conversation_id = ? AND id > ? AND id <= ?",
            (conv_id, previous, msg_id),
        )
        counted += int(row["n"]) if row is not None else 0
        numbers[msg_id] = counted
        previous = msg_id
    return numbers


def message_places(db: Db, conv_id: int, ids: Iterable[int]) -> dict[int, tuple[int, str | None]]:
    """Each of `ids` (0 or more) with how many of the conversation's messages have an id up to
    it (as `message_numbers` counts: a message's number when it is one), and its speaker when it
    is a message of the conversation, None when it is not (another conversation's, a deleted
    one's, nothing's): what a memory text's references are read with (chat/numbering.py).

    Counted as `message_numbers` counts: as many index entries as the largest id's place."""
    found: dict[int, tuple[int, str | None]] = {}
    if not is_sqlite_int(conv_id):
        return found
    counted, previous = 0, -1
    for msg_id in sorted({i for i in ids if is_sqlite_int(i) and i >= 0}):
        row = db.select_one(
            """SELECT COUNT(*) AS n, MAX(id = ?) AS here,
                      MAX(CASE WHEN id = ? THEN speaker END) AS speaker
               FROM messages WHERE conversation_id = ? AND id > ? AND id <= ?""",
            (msg_id, msg_id, conv_id, previous, msg_id),
        )
        counted += int(row["n"]) if row is not None else 0
        here = row is not None and bool(row["here"])
        found[msg_id] = (counted, str(row["speaker"] or "") if here and row is not None else None)
        previous = msg_id
    return found


def deleted_messages(db: Db, ids: Iterable[int]) -> frozenset[int]:
    """Of `ids`, those of deleted messages: message ids are AUTOINCREMENT, never reused (a
    branch raises the sequence over the ids it reserves, branching.py), so a deleted message's
    id is one between 1 and the highest ever given out that no message has. An id of a message
    (of any conversation) or one never given out is not deleted. Which conversation a deleted
    message was in is not kept: an id deleted from another conversation is deleted too.

    One read of the sequence, and one lookup by primary key per id in its span."""
    wanted = sorted({i for i in ids if is_sqlite_int(i) and i > 0})
    if not wanted:
        return frozenset()
    top = next_message_id(db) - 1
    gone: set[int] = set()
    for msg_id in wanted:
        if msg_id > top:
            break
        if db.select_one("SELECT 1 AS here FROM messages WHERE id = ?", (msg_id,)) is None:
            gone.add(msg_id)
    return frozenset(gone)


def message_id_at(db: Db, conv_id: int, number: int) -> int | None:
    """The id of the message shown as #`number` (1 = the first), or None."""
    if number < 1 or not is_sqlite_int(number) or not is_sqlite_int(conv_id):
        return None
    row = db.select_one(
        "SELECT id FROM messages WHERE conversation_id = ? ORDER BY id LIMIT 1 OFFSET ?",
        (conv_id, number - 1),
    )
    return int(row["id"]) if row is not None else None


def iter_messages(
    db: Db, conv_id: int, batch: int = 500, model_key: str | None = None
) -> Iterator[StoredMessage]:
    """Every message oldest first, `batch` at a time (keyset by id: no OFFSET, no long lock)."""
    if batch < 1:
        raise StoreError(f"batch must be 1 or more, got {batch}")
    after = 0
    while True:
        page = messages_from(db, conv_id, after + 1, batch, model_key)
        yield from page
        if len(page) < batch:
            return
        after = page[-1].id or after
