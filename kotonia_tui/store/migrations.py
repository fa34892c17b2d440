"""The versioned schema: `PRAGMA user_version` plus an ordered list of migration steps.

Step N takes a database at version N-1 to version N. Each step runs in its own `BEGIN IMMEDIATE`
transaction together with the `user_version` bump, so a crash leaves the file at a whole version,
and a second app instance starting at the same moment waits and then finds the step done.
Steps are append-only: once released, a step is never edited; a change is a new step.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

from kotonia_tui import story_dates
from kotonia_tui.store.connection import Db
from kotonia_tui.store.errors import StoreError
from kotonia_tui.terms import unspaced_ranges

# AUTOINCREMENT on entity tables: ids are never reused, because chapters, memory state and fold
# jobs refer to message ids by range; a reused id would silently land inside an old range.
_STEP_1_BASE = [
    """CREATE TABLE characters (
        key TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        card_hash TEXT NOT NULL,
        source_path TEXT NOT NULL,
        first_seen TEXT NOT NULL,
        last_seen TEXT NOT NULL
    )""",
    """CREATE TABLE conversations (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        character_key TEXT NOT NULL,
        character_name TEXT NOT NULL,
        persona_name TEXT NOT NULL,
        persona_description TEXT NOT NULL DEFAULT '',
        title TEXT NOT NULL DEFAULT '',
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        message_count INTEGER NOT NULL DEFAULT 0,
        extra TEXT NOT NULL DEFAULT '{}'
    )""",
    "CREATE INDEX conversations_by_updated ON conversations(updated_at)",
    "CREATE INDEX conversations_by_character ON conversations(character_key, updated_at)",
    """CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        role TEXT NOT NULL,
        speaker TEXT NOT NULL,
        text TEXT NOT NULL,
        segments TEXT NOT NULL DEFAULT '[]',
        images TEXT NOT NULL DEFAULT '[]',
        created_at TEXT NOT NULL,
        edited INTEGER NOT NULL DEFAULT 0,
        status TEXT NOT NULL DEFAULT 'complete',
        status_reason TEXT,
        reasoning TEXT,
        chosen INTEGER NOT NULL DEFAULT 0,
        extra TEXT NOT NULL DEFAULT '{}'
    )""",
    "CREATE INDEX messages_by_conversation ON messages(conversation_id, id)",
    """CREATE TABLE alternatives (
        message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        idx INTEGER NOT NULL,
        text TEXT NOT NULL,
        segments TEXT NOT NULL DEFAULT '[]',
        status TEXT NOT NULL DEFAULT 'complete',
        status_reason TEXT,
        reasoning TEXT,
        created_at TEXT NOT NULL,
        extra TEXT NOT NULL DEFAULT '{}',
        PRIMARY KEY (message_id, idx)
    ) WITHOUT ROWID""",
    """CREATE TABLE token_counts (
        message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        model_key TEXT NOT NULL,
        tokens INTEGER NOT NULL,
        PRIMARY KEY (message_id, model_key)
    ) WITHOUT ROWID""",
    """CREATE TABLE images (
        hash TEXT PRIMARY KEY,
        mime TEXT NOT NULL,
        data BLOB,
        path TEXT,
        width INTEGER NOT NULL,
        height INTEGER NOT NULL,
        created_at TEXT NOT NULL
    )""",
    """CREATE TABLE chapters (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        first_message_id INTEGER NOT NULL,
        last_message_id INTEGER NOT NULL,
        text TEXT NOT NULL,
        created_at TEXT NOT NULL,
        model TEXT NOT NULL DEFAULT '',
        gen_ms REAL NOT NULL DEFAULT 0,
        tokens INTEGER NOT NULL DEFAULT 0,
        stale INTEGER NOT NULL DEFAULT 0,
        in_synopsis INTEGER NOT NULL DEFAULT 0,
        story_time TEXT,
        CHECK (first_message_id <= last_message_id)
    )""",
    "CREATE INDEX chapters_by_conversation ON chapters(conversation_id, id)",
    """CREATE TABLE synopses (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        version INTEGER NOT NULL,
        text TEXT NOT NULL,
        through_message_id INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        model TEXT NOT NULL DEFAULT '',
        gen_ms REAL NOT NULL DEFAULT 0,
        tokens INTEGER NOT NULL DEFAULT 0,
        current INTEGER NOT NULL DEFAULT 0,
        UNIQUE (conversation_id, version)
    )""",
    # Exactly one current version per conversation, enforced by the database itself.
    "CREATE UNIQUE INDEX synopses_one_current ON synopses(conversation_id) WHERE current = 1",
    """CREATE TABLE fold_jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        first_message_id INTEGER,
        last_message_id INTEGER,
        status TEXT NOT NULL DEFAULT 'pending',
        attempts INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        not_before TEXT NOT NULL,
        created_at TEXT NOT NULL,
        claimed_at TEXT,
        finished_at TEXT
    )""",
    "CREATE INDEX fold_jobs_due ON fold_jobs(status, not_before)",
    "CREATE INDEX fold_jobs_by_conversation ON fold_jobs(conversation_id, id)",
    """CREATE TABLE turn_metrics (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        message_id INTEGER REFERENCES messages(id) ON DELETE SET NULL,
        prompt_positions INTEGER NOT NULL,
        reused INTEGER NOT NULL,
        evaluated INTEGER NOT NULL,
        prompt_ms REAL NOT NULL,
        generated INTEGER NOT NULL,
        gen_ms REAL NOT NULL,
        tokens_per_s REAL NOT NULL,
        finish_reason TEXT NOT NULL,
        images INTEGER NOT NULL DEFAULT 0,
        slot TEXT NOT NULL,
        created_at TEXT NOT NULL
    )""",
    "CREATE INDEX turn_metrics_by_conversation ON turn_metrics(conversation_id, id)",
    "CREATE INDEX turn_metrics_by_message ON turn_metrics(message_id)",
]

_STEP_2_MEMORY_STATE = [
    """CREATE TABLE memory_state (
        conversation_id INTEGER PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
        verbatim_start_id INTEGER,
        applied_chapter_id INTEGER,
        applied_synopsis_id INTEGER,
        forced_cut_through_id INTEGER,
        updated_at TEXT NOT NULL
    )""",
    # A refold never rewrites a chapter: it adds one and points the old one at it.
    "ALTER TABLE chapters ADD COLUMN superseded_by INTEGER REFERENCES chapters(id)",
    # The per-turn chapter read scans only the live chapters, in story order.
    """CREATE INDEX chapters_live ON chapters(conversation_id, first_message_id)
        WHERE in_synopsis = 0 AND superseded_by IS NULL""",
    # At most one pending/running job per conversation, kind and range, even across processes.
    """CREATE UNIQUE INDEX fold_jobs_one_open ON fold_jobs(
        conversation_id, kind, ifnull(first_message_id, -1), ifnull(last_message_id, -1))
        WHERE status IN ('pending', 'running')""",
]

# The memory block the prompt carries is kept as rendered text: between folds the prompt must
# repeat it byte for byte, whatever happens to the chapter rows (refolds, a major GC landing).
_STEP_3_MEMORY_TEXT = [
    "ALTER TABLE memory_state ADD COLUMN memory_text TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE memory_state ADD COLUMN memory_tokens INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE memory_state ADD COLUMN memory_model_key TEXT NOT NULL DEFAULT ''",
]

# Full-text search over every message, and the settings a character or a conversation overrides.
# Two FTS5 indexes over messages.text, kept in step by triggers, so every way a message's text
# is written (a turn, an import, an edit, a chosen version, a delete, a conversation's cascade)
# updates them in its own transaction, and a deleted message is never found:
# - message_words (unicode61, accents removed): words, for scripts that put spaces between them;
# - message_trigrams (trigram): substrings, for Japanese, Chinese and Thai, which do not. Only
#   messages with such characters are in it, each padded with two U+E000 so that every
#   character of the text begins a trigram: a one- or two-character query is looked up in its
#   vocabulary (message_trigram_terms) instead of scanning the text (store/search.py).
# The step was released with the GLOB class and the tokenizer below; a step is never edited, so
# they stay as they were (the search-by-script step replaced both).
_PAD = "char(57344, 57344)"
_RELEASED_UNSPACED_GLOB = (
    "'*[\u0e00-\u0eff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
    "\U00020000-\U0003134f]*'"
)
_RELEASED_WORDS_TOKENIZER = "'unicode61 remove_diacritics 2'"


def _search_index(words_tokenizer: str, unspaced_glob: str) -> list[str]:
    """The two indexes, their vocabularies and the triggers that keep them in step: words with
    `words_tokenizer`; substrings of the messages matching `unspaced_glob` (an SQL string)."""
    return [
        f"""CREATE VIRTUAL TABLE message_words USING fts5(
        text, content='messages', content_rowid='id', tokenize={words_tokenizer})""",
        f"""CREATE VIEW message_trigram_source AS
        SELECT id, text || {_PAD} AS text FROM messages WHERE text GLOB {unspaced_glob}""",
        """CREATE VIRTUAL TABLE message_trigrams USING fts5(
        text, content='message_trigram_source', content_rowid='id', tokenize='trigram')""",
        "CREATE VIRTUAL TABLE message_trigram_terms USING fts5vocab(message_trigrams, 'row')",
        "CREATE VIRTUAL TABLE message_word_terms USING fts5vocab(message_words, 'row')",
        f"""CREATE TRIGGER messages_search_insert AFTER INSERT ON messages BEGIN
        INSERT INTO message_words(rowid, text) VALUES (new.id, new.text);
        INSERT INTO message_trigrams(rowid, text)
            SELECT new.id, new.text || {_PAD} WHERE new.text GLOB {unspaced_glob};
    END""",
        f"""CREATE TRIGGER messages_search_delete AFTER DELETE ON messages BEGIN
        INSERT INTO message_words(message_words, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO message_trigrams(message_trigrams, rowid, text)
            SELECT 'delete', old.id, old.text || {_PAD} WHERE old.text GLOB {unspaced_glob};
    END""",
        # One trigger, in this order: the old text leaves the index before the new one enters.
        f"""CREATE TRIGGER messages_search_update AFTER UPDATE OF text ON messages BEGIN
        INSERT INTO message_words(message_words, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO message_trigrams(message_trigrams, rowid, text)
            SELECT 'delete', old.id, old.text || {_PAD} WHERE old.text GLOB {unspaced_glob};
        INSERT INTO message_words(rowid, text) VALUES (new.id, new.text);
        INSERT INTO message_trigrams(rowid, text)
            SELECT new.id, new.text || {_PAD} WHERE new.text GLOB {unspaced_glob};
    END""",
    ]


_STEP_SEARCH_AND_CHAT_SETTINGS = [
    *_search_index(_RELEASED_WORDS_TOKENIZER, _RELEASED_UNSPACED_GLOB),
    # The messages stored before this version.
    "INSERT INTO message_words(message_words) VALUES ('rebuild')",
    "INSERT INTO message_trigrams(message_trigrams) VALUES ('rebuild')",
    # Generation settings, Author's Note and World Info files, as JSON (domain.ChatSettings):
    # the profile's values, overridden by the character's, overridden by the conversation's.
    """CREATE TABLE character_settings (
        character_key TEXT PRIMARY KEY,
        settings TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )""",
    """CREATE TABLE conversation_settings (
        conversation_id INTEGER PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
        settings TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )""",
]


# Issue 19: personas kept in the database, each conversation linked to the one it is played as
# (its name and description stay copied on the row: a conversation goes on as it was when its
# persona is deleted), and conversations deleted in the app kept until the session ends so the
# deletion can be undone.
_STEP_PERSONAS_CREATE = [
    """CREATE TABLE personas (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL UNIQUE,
        description TEXT NOT NULL DEFAULT '',
        image TEXT REFERENCES images(hash),
        is_default INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )""",
    "CREATE UNIQUE INDEX personas_one_default ON personas(is_default) WHERE is_default = 1",
    """ALTER TABLE conversations ADD COLUMN persona_id INTEGER
        REFERENCES personas(id) ON DELETE SET NULL""",
    "ALTER TABLE conversations ADD COLUMN deleted_at TEXT",
    "CREATE INDEX conversations_by_persona ON conversations(persona_id)",
]


def _personas_and_deleted_conversations(db: Db) -> None:
    """The step, and the personas the existing conversations were played as: one per name
    (names differing only in case are one persona), with the newest conversation's
    description. No default yet: the app makes the settings' persona the default."""
    for statement in _STEP_PERSONAS_CREATE:
        db.execute(statement)
    rows = db.select(
        """SELECT persona_name, persona_description, created_at, updated_at
           FROM conversations WHERE trim(persona_name) != '' ORDER BY updated_at DESC, id DESC"""
    )
    chosen: dict[str, dict[str, str]] = {}
    for row in rows:
        key = row["persona_name"].casefold()
        if key not in chosen:  # the newest conversation's spelling and description
            chosen[key] = {
                "name": row["persona_name"],
                "description": row["persona_description"],
                "created_at": row["created_at"],
                "updated_at": row["updated_at"],
            }
        else:
            chosen[key]["created_at"] = min(chosen[key]["created_at"], row["created_at"])
    ids = {key: db.insert("personas", dict(persona)) for key, persona in chosen.items()}
    for row in db.select("SELECT id, persona_name FROM conversations"):
        persona_id = ids.get(row["persona_name"].casefold())
        if persona_id is not None:
            db.execute(
                "UPDATE conversations SET persona_id = ? WHERE id = ?", (persona_id, row["id"])
            )


def _turn_metrics_restored(db: Db) -> None:
    """Issue 17: how many of a call's reused cells came from a saved KV state (`--stats`
    restored); figures from before it restored nothing."""
    db.execute("ALTER TABLE turn_metrics ADD COLUMN restored INTEGER NOT NULL DEFAULT 0")


# Issue 16, semantic recall: one vector per message and embedding model (store/vectors.py). A
# plain table, not a sqlite-vec virtual table, so that every connection keeps it in step
# without the extension loaded: a deleted message takes its vectors along (the foreign key),
# and a changed text (an edit, another version chosen, a reply finished) drops them (the
# trigger) until the background worker embeds the new text.
_STEP_MESSAGE_VECTORS = [
    """CREATE TABLE message_vectors (
        id INTEGER PRIMARY KEY,
        message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        conversation_id INTEGER NOT NULL,
        model_key TEXT NOT NULL,
        text_hash TEXT NOT NULL,
        vector BLOB NOT NULL,
        UNIQUE (message_id, model_key)
    )""",
    """CREATE INDEX message_vectors_by_conversation
        ON message_vectors(model_key, conversation_id, message_id)""",
    """CREATE TRIGGER messages_vectors_stale AFTER UPDATE OF text ON messages
        WHEN old.text IS NOT new.text BEGIN
        DELETE FROM message_vectors WHERE message_id = new.id;
    END""",
]


# Issue 14: memory that stays correct at small windows.
_STEP_FOLD_CLAIMS_AND_TARGETS = [
    # Who runs a job and until when its claim holds: a second instance starting up requeues only
    # jobs whose claimer is gone, never one another instance is still running.
    "ALTER TABLE fold_jobs ADD COLUMN claimed_by TEXT",
    "ALTER TABLE fold_jobs ADD COLUMN lease_until TEXT",
    # Forced cuts are counted, not only logged.
    "ALTER TABLE memory_state ADD COLUMN forced_cuts INTEGER NOT NULL DEFAULT 0",
    # The length a synopsis version was written to hold (0: none recorded); `stale` marks
    # versions that folded a chapter later refolded: a rebuild never starts from them.
    "ALTER TABLE synopses ADD COLUMN target_tokens INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE synopses ADD COLUMN stale INTEGER NOT NULL DEFAULT 0",
    # What a chapter's record should say beside its text (a message summarized in parts).
    "ALTER TABLE chapters ADD COLUMN note TEXT NOT NULL DEFAULT ''",
]


def _fold_claims_and_targets(db: Db) -> None:
    """Issue 14: fold job claims with leases, counted forced cuts, synopsis targets and stale
    versions, chapter notes (after every step of main's, so a store main migrated goes on)."""
    _run(_STEP_FOLD_CLAIMS_AND_TARGETS)(db)


# Structured chapters and the append-only ledger (issue 15). Old prose chapters keep their text
# and their place in memory (structure NULL); new folds write structured chapters. A ledger entry
# is written by one chapter and ended (resolved, superseded) by a later one, never rewritten.
_STEP_LEDGER = [
    "ALTER TABLE chapters ADD COLUMN structure TEXT",
    "ALTER TABLE chapters ADD COLUMN readback_misses TEXT NOT NULL DEFAULT '[]'",
    """CREATE TABLE ledger (
        id INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        subject TEXT NOT NULL DEFAULT '',
        evidence TEXT NOT NULL DEFAULT '[]',
        chapter_id INTEGER NOT NULL REFERENCES chapters(id),
        ended_by_chapter_id INTEGER REFERENCES chapters(id),
        end_kind TEXT,
        end_note TEXT NOT NULL DEFAULT '',
        created_at TEXT NOT NULL
    )""",
    "CREATE INDEX ledger_by_conversation ON ledger(conversation_id, id)",
]


def _run(statements: list[str]) -> Callable[[Db], None]:
    def step(db: Db) -> None:
        for statement in statements:
            db.execute(statement)

    return step


def _message_vectors(db: Db) -> None:
    """Issue 16: the vectors semantic recall ranks (none yet: the worker embeds the stored
    messages in the background when semantic recall is on)."""
    for statement in _STEP_MESSAGE_VECTORS:
        db.execute(statement)


def _search_and_chat_settings(db: Db) -> None:
    """Issue 19: the search indexes (over the messages already stored) and the settings tables."""
    for statement in _STEP_SEARCH_AND_CHAT_SETTINGS:
        db.execute(statement)


# Issue 29: the indexes follow the term module's rules (kotonia_tui/terms.py), so that what a
# search finds is what grounding, the readback and recall call "the same words":
# - combining marks are part of a word (unicode61's default made every vowel sign of
#   Devanagari or Thai and every Hebrew point a word break: "हिन्दी" was three one-letter words);
# - the trigram index holds every message with a script written without spaces, decided from
#   Unicode data (terms.unspaced_ranges): Khmer, Myanmar and the Tai scripts join Thai, Lao,
#   kana and Han, which now has all its extensions.
# The GLOB class is computed from the term module when the step runs; a change to the term
# module's scripts needs a new step like this one.
_WORDS_TOKENIZER = "\"unicode61 remove_diacritics 2 categories 'L* N* Co M*'\""
_SEARCH_TABLES = (
    "message_trigram_terms",
    "message_word_terms",
    "message_trigrams",
    "message_words",
)


def _unspaced_glob() -> str:
    """The unspaced scripts as an SQL GLOB string literal (SQLite compares code points in GLOB
    ranges): a text matches when it has any character of them. Ranges are joined over gaps that
    hold no letter (digits, signs, unassigned code points): a message with only those goes into
    the trigram index too, which costs it nothing, and each message written is checked against
    14 ranges instead of 64."""
    joined: list[tuple[int, int]] = []
    for low, high in unspaced_ranges():
        if joined and not any(_is_letter(c) for c in range(joined[-1][1] + 1, low)):
            joined[-1] = (joined[-1][0], high)
        else:
            joined.append((low, high))
    ranges = "".join(chr(low) if low == high else f"{chr(low)}-{chr(high)}" for low, high in joined)
    return f"'*[{ranges}]*'"


def _is_letter(code: int) -> bool:
    return not 0xD800 <= code < 0xE000 and unicodedata.category(chr(code)).startswith("L")


def _search_by_script(db: Db) -> None:
    """Issue 29: the search indexes re-created on the term module's rules and rebuilt from the
    stored messages (in the step's transaction: a crash leaves the old indexes whole)."""
    for trigger in ("insert", "delete", "update"):
        db.execute(f"DROP TRIGGER messages_search_{trigger}")
    for table in _SEARCH_TABLES:
        db.execute(f"DROP TABLE {table}")
    db.execute("DROP VIEW message_trigram_source")
    for statement in _search_index(_WORDS_TOKENIZER, _unspaced_glob()):
        db.execute(statement)
    db.execute("INSERT INTO message_words(message_words) VALUES ('rebuild')")
    db.execute("INSERT INTO message_trigrams(message_trigrams) VALUES ('rebuild')")


def _scene_dates(db: Db) -> None:
    """Issue 28: each message's scene date (story_dates: a date its opening line gives), kept
    beside its text, with an index of the dated messages alone, so "the date of the scene a
    message belongs to" is one indexed read however long the conversation; stored messages
    get theirs here."""
    db.execute("ALTER TABLE messages ADD COLUMN scene_date TEXT")
    db.execute(
        "CREATE INDEX messages_scene_dates ON messages(conversation_id, id) "
        "WHERE scene_date IS NOT NULL"
    )
    last = 0
    while rows := db.select(  # in batches: a big archive is not held in memory at once
        "SELECT id, substr(text, 1, ?) AS opening FROM messages WHERE id > ? ORDER BY id "
        "LIMIT 1000",
        (4 * story_dates.OPENING_CHARS, last),
    ):
        for row in rows:
            date = story_dates.scene_date(str(row["opening"]))
            if date is not None:
                db.execute("UPDATE messages SET scene_date = ? WHERE id = ?", (date, row["id"]))
        last = int(rows[-1]["id"])


# Issue 29: how a chapter, a synopsis version and a ledger entry were made is a column, not a
# lead in their text. Rows written before it are converted by the leads the code then wrote
# (copied here as they were: a step never changes once released, whatever the code says later).
_OLD_QUOTED_NOTE = "quoted from messages"
_OLD_QUOTED_SYNOPSIS_LEADS = (
    "Quoted from the story so far (the chronicler's summaries could not be used):",
    "Quoted from the story so far (the chronicler's summaries ran too long):",
)
_OLD_READBACK_LEAD = 'said "'


def _starts(column: str) -> str:
    """SQL true when `column` starts with the parameter, byte for byte (LIKE folds case and
    reads `%` and `_` as wildcards)."""
    return f"substr({column}, 1, length(?)) = ?"


def _provenance_columns(db: Db) -> None:
    """Issue 29: `chapters.origin` (summary, quoted, parts), `synopses.origin` (summary,
    quoted) and `ledger.source` (chronicler, readback), the stored rows converted by their
    old text leads: a chapter note that began with the quoted lead is quoted, any other note
    said it was summarized in parts; a synopsis that began with either quoted lead is quoted;
    an entry that began with `said "` quotes the user's line (the readback)."""
    db.execute("ALTER TABLE chapters ADD COLUMN origin TEXT NOT NULL DEFAULT 'summary'")
    db.execute("ALTER TABLE synopses ADD COLUMN origin TEXT NOT NULL DEFAULT 'summary'")
    db.execute("ALTER TABLE ledger ADD COLUMN source TEXT NOT NULL DEFAULT 'chronicler'")
    db.execute(
        f"UPDATE chapters SET origin = 'quoted' WHERE {_starts('note')}",
        (_OLD_QUOTED_NOTE, _OLD_QUOTED_NOTE),
    )
    db.execute("UPDATE chapters SET origin = 'parts' WHERE origin = 'summary' AND note != ''")
    for lead in _OLD_QUOTED_SYNOPSIS_LEADS:
        db.execute(f"UPDATE synopses SET origin = 'quoted' WHERE {_starts('text')}", (lead, lead))
    db.execute(
        f"UPDATE ledger SET source = 'readback' WHERE {_starts('text')}",
        (_OLD_READBACK_LEAD, _OLD_READBACK_LEAD),
    )


# Issue 31: group chats and quick replies.
# - A group conversation's cast: its cards in a stable order (the shared setup joins them in
#   it), each muted or not. A conversation with no cast rows is a one-card chat with
#   conversations.character_key; a group lists every member, the first card included.
# - Who spoke a group reply: the card's key on the message (the name stays in `speaker`).
# - How the group picks who answers (domain.ReplyOrder), kept per conversation.
# - Quick replies: the player's snippets, global (character_key NULL) or one character's.
_STEP_GROUP_CHATS = [
    """CREATE TABLE conversation_cast (
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        character_key TEXT NOT NULL,
        character_name TEXT NOT NULL,
        position INTEGER NOT NULL,
        muted INTEGER NOT NULL DEFAULT 0,
        added_at TEXT NOT NULL,
        PRIMARY KEY (conversation_id, character_key),
        UNIQUE (conversation_id, position)
    ) WITHOUT ROWID""",
    "ALTER TABLE messages ADD COLUMN character_key TEXT",
    "ALTER TABLE conversations ADD COLUMN reply_order TEXT NOT NULL DEFAULT 'natural'",
    """CREATE TABLE quick_replies (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        character_key TEXT,
        label TEXT NOT NULL,
        text TEXT NOT NULL,
        send INTEGER NOT NULL DEFAULT 1,
        position INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL
    )""",
    "CREATE INDEX quick_replies_by_character ON quick_replies(character_key, position, id)",
]


def _group_chats(db: Db) -> None:
    """Issue 31: casts, the speaker's card on messages, the reply order, quick replies."""
    _run(_STEP_GROUP_CHATS)(db)


def _synopsis_dropped(db: Db) -> None:
    """Issue 28: the sentences of a synopsis draft left out because none of them rests on what
    it folds (a JSON list; versions stored before have none recorded)."""
    db.execute("ALTER TABLE synopses ADD COLUMN dropped TEXT NOT NULL DEFAULT '[]'")


def _ledger_label_numbers(db: Db) -> None:
    """The number a ledger entry's label shows ("T7"): NULL for its own id (every entry
    stored before, and every entry a chapter writes); a branch's copy keeps the original's, so
    the branch's memory block, chapters and chronicler name it as the original's do."""
    db.execute("ALTER TABLE ledger ADD COLUMN label_number INTEGER")


def _retired_chapters(db: Db) -> None:
    """A chapter every message of whose range was deleted leaves the memory with no successor
    (`chapters.retired`; a refold that finds nothing to fold retires it, and its ledger entries
    end `retired`). The index of the live chapters a turn reads leaves retired ones out too.
    `memory_state.applied_retired` counts the conversation's retired chapters when its memory
    block was applied: a chapter retired since makes the next turn apply the memory again.
    Stored rows retired nothing: 0 for both."""
    db.execute("ALTER TABLE chapters ADD COLUMN retired INTEGER NOT NULL DEFAULT 0")
    db.execute("DROP INDEX chapters_live")
    db.execute(
        """CREATE INDEX chapters_live ON chapters(conversation_id, first_message_id)
        WHERE in_synopsis = 0 AND superseded_by IS NULL AND retired = 0"""
    )
    # The retired chapters of a conversation, counted each turn (a handful at most).
    db.execute("CREATE INDEX chapters_retired ON chapters(conversation_id) WHERE retired = 1")
    db.execute("ALTER TABLE memory_state ADD COLUMN applied_retired INTEGER NOT NULL DEFAULT 0")


# Index i holds the step that takes version i to version i + 1.
STEPS: list[Callable[[Db], None]] = [
    _run(_STEP_1_BASE),
    _run(_STEP_2_MEMORY_STATE),
    _run(_STEP_3_MEMORY_TEXT),
    _personas_and_deleted_conversations,
    _search_and_chat_settings,
    _turn_metrics_restored,
    _message_vectors,
    _fold_claims_and_targets,
    LEDGER_STEP := _run(_STEP_LEDGER),
    _search_by_script,
    _scene_dates,
    _provenance_columns,
    _group_chats,
    _synopsis_dropped,
    _ledger_label_numbers,
    _retired_chapters,
]
SCHEMA_VERSION = len(STEPS)


def check_version(db: Db) -> int:
    """The file's version, refusing a newer schema or a SQLite file that is not Kotonia's."""
    with db.read():  # one snapshot: another instance may be creating the tables right now
        version = db.user_version
        rows = db.select(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{db.path} was written by a newer Kotonia TUI (schema {version}, this one knows "
            f"{SCHEMA_VERSION}): upgrade the app"
        )
    if version == 0 and rows:
        names = ", ".join(sorted(row["name"] for row in rows))
        raise StoreError(
            f"{db.path}: is a SQLite database but not a Kotonia one "
            f"(schema version 0 with tables {names}); refusing to change it"
        )
    return version


def migrate(db: Db, target: int = SCHEMA_VERSION) -> int:
    """Apply the missing steps up to `target`, one transaction each; returns the new version."""
    check_version(db)
    for number in range(db.user_version + 1, target + 1):
        with db.write():
            # Re-read inside the write lock: another instance may have just applied this step.
            if db.user_version >= number:
                continue
            STEPS[number - 1](db)
            db.execute(f"PRAGMA user_version = {number}")
    return db.user_version
