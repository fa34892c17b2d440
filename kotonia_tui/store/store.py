"""`Store`: the app's one door to the database, composed from the table modules beside it.

Use it from one thread at a time (the chat service calls it from the asyncio thread). Every
method is one transaction; reads that touch several tables see one snapshot.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType

from kotonia_tui.domain import (
    Alternative,
    CastMember,
    Chapter,
    ChatSettings,
    Conversation,
    FoldJob,
    FoldStatus,
    GroupCast,
    LedgerEnding,
    LedgerEntry,
    Message,
    MessageStatus,
    NewChapter,
    QuickReply,
    ReplyOrder,
    Role,
    Segment,
    StoredChapter,
    StoredConversation,
    StoredFoldJob,
    StoredLedgerEntry,
    StoredMessage,
    StoredPersona,
    StoredQuickReply,
    StoredSynopsis,
    Synopsis,
    TurnMetrics,
)
from kotonia_tui.store import (
    branching,
    cast,
    chat_settings,
    conversations,
    fold_jobs,
    images,
    ledger_rows,
    memory_rows,
    messages,
    metrics,
    migrations,
    personas,
    quick_replies,
    search,
    vectors,
)
from kotonia_tui.store.branching import Branched
from kotonia_tui.store.connection import DEFAULT_BUSY_TIMEOUT_S, Db
from kotonia_tui.store.errors import StoreError
from kotonia_tui.store.records import (
    CharacterSeen,
    MemoryRows,
    MemoryState,
    Retirement,
    TurnMetricsRecord,
)
from kotonia_tui.store.search import SearchHit, SearchMode, SearchOrder
from kotonia_tui.store.vectors import (
    PendingText,
    SimilarHit,
    VectorCounts,
    VectorSearch,
    VectorsUnavailable,
)
from kotonia_tui.terms import Term

IMPORT_BATCH = 2000  # messages per insert while a conversation is imported


class Store:
    """Conversations, messages, memory, fold jobs and metrics in one SQLite file (WAL)."""

    def __init__(self, db: Db) -> None:
        self._db = db
        self._vector_search: VectorSearch | None = None
        self._vectors_unavailable: str | None = None

    @classmethod
    def open(
        cls,
        path: Path | str,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        *,
        read_only: bool = False,
    ) -> Store:
        """Open or create the file at `path` (and its folders); bring its schema up to date.

        `busy_timeout_s` is how long a call waits while another instance holds the write lock.
        `read_only` opens an existing file without writing anything (a read-only data dir):
        reads work, a write is a StoreError, and a schema that needs upgrading is refused.
        """
        db = Db.connect(Path(path), busy_timeout_s, read_only=read_only)
        try:
            version = migrations.check_version(db)  # before a pragma changes a file not ours
            if read_only:
                if version != migrations.SCHEMA_VERSION:
                    raise StoreError(
                        f"{db.path}: schema {version} must be upgraded to "
                        f"{migrations.SCHEMA_VERSION}, which needs write access"
                    )
                return cls(db)
            db.configure()
            migrations.migrate(db)
        except sqlite3.Error as exc:
            db.close()
            raise db.error(exc) from exc
        except BaseException:
            db.close()
            raise
        return cls(db)

    def close(self) -> None:
        if self._vector_search is not None:
            self._vector_search.close()  # after a search still running
            self._vector_search = None
        self._db.close()  # after a statement still running

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def path(self) -> Path:
        return self._db.path

    @property
    def schema_version(self) -> int:
        return self._db.user_version

    @property
    def rows_read(self) -> int:
        """Rows returned by SELECTs since open: per-turn reads must not grow with history."""
        return self._db.rows_read

    def copy_to(self, path: Path) -> None:
        """A consistent copy of the whole database, as one file at `path` (SQLite's online
        backup: what the write-ahead log holds is in it; a file already there is replaced)."""
        self._db.copy_to(path)

    def integrity_check(self) -> str:
        """ "ok", or SQLite's list of problems (also checks foreign keys)."""
        problems = [str(row[0]) for row in self._db.select("PRAGMA integrity_check")]
        fk = self._db.select("PRAGMA foreign_key_check")
        problems += [f"foreign key: {tuple(row)}" for row in fk]
        return "ok" if problems == ["ok"] else "\n".join(p for p in problems if p != "ok")

    # Characters and conversations --------------------------------------------------------------

    def upsert_character(self, key: str, name: str, card_hash: str, source_path: str) -> None:
        conversations.upsert_character(self._db, key, name, card_hash, source_path)

    def characters_seen(self) -> list[CharacterSeen]:
        return conversations.characters_seen(self._db)

    def create_conversation(self, conv: Conversation) -> StoredConversation:
        if conv.id is not None:
            raise StoreError(f"conversation {conv.id} already has an id; create a new one")
        with self._db.write():
            return conversations.insert_conversation(self._db, conv)

    def get_conversation(self, conv_id: int) -> StoredConversation:
        return conversations.get_conversation(self._db, conv_id)

    def list_conversations(self, character_key: str | None = None) -> list[StoredConversation]:
        return conversations.list_conversations(self._db, character_key)

    def rename_conversation(self, conv_id: int, title: str) -> StoredConversation:
        return conversations.rename_conversation(self._db, conv_id, title)

    def delete_conversation(self, conv_id: int) -> None:
        conversations.delete_conversation(self._db, conv_id)

    def hide_conversation(self, conv_id: int) -> None:
        """Deleted in the app: hidden from every reader until `unhide` or `purge_hidden`."""
        conversations.hide_conversation(self._db, conv_id)

    def unhide_conversation(self, conv_id: int) -> StoredConversation:
        return conversations.unhide_conversation(self._db, conv_id)

    def purge_hidden(self, conv_ids: list[int] | None = None) -> list[int]:
        """Remove hidden conversations for good (those in `conv_ids`, or all of them)."""
        return conversations.purge_hidden(self._db, conv_ids)

    def branch_conversation(
        self,
        source_id: int,
        through_id: int | None,
        conv: Conversation,
        retarget: branching.Retarget | None = None,
        restructure: branching.Restructure | None = None,
    ) -> Branched:
        """A new conversation sharing the source's messages through `through_id` (None: all)
        and the memory that covers them (the ledger too), its texts citing the copies when
        `retarget` rewrites their message references, and its chapters' structures when
        `restructure` rewrites their evidence ids (store/branching.py)."""
        if conv.id is not None:
            raise StoreError(f"conversation {conv.id} already has an id; branch into a new one")
        return branching.branch_conversation(
            self._db, source_id, through_id, conv, retarget, restructure
        )

    # Group casts and quick replies (issue 31) -------------------------------------------------

    def cast(self, conv_id: int) -> list[CastMember]:
        """The conversation's cards in their stable order (a one-card chat: its card)."""
        return cast.cast(self._db, conv_id)

    def casts(self) -> dict[int, list[CastMember]]:
        """Every group conversation's cards in their order, by conversation id."""
        return cast.casts(self._db)

    def is_group(self, conv_id: int) -> bool:
        return cast.is_group(self._db, conv_id)

    def set_cast(self, conv_id: int, members: Sequence[tuple[str, str]]) -> list[CastMember]:
        return cast.set_cast(self._db, conv_id, list(members))

    def add_cast_member(self, conv_id: int, key: str, name: str) -> list[CastMember]:
        return cast.add_member(self._db, conv_id, key, name)

    def remove_cast_member(self, conv_id: int, key: str) -> list[CastMember]:
        return cast.remove_member(self._db, conv_id, key)

    def set_cast_muted(self, conv_id: int, key: str, muted: bool) -> list[CastMember]:
        return cast.set_muted(self._db, conv_id, key, muted)

    def reply_order(self, conv_id: int) -> ReplyOrder:
        return cast.reply_order(self._db, conv_id)

    def set_reply_order(self, conv_id: int, order: ReplyOrder) -> None:
        cast.set_reply_order(self._db, conv_id, order)

    def quick_replies(self, character_keys: Sequence[str] = ()) -> list[StoredQuickReply]:
        """The global quick replies, then those of each character named."""
        return quick_replies.quick_replies(self._db, tuple(character_keys))

    def add_quick_reply(self, reply: QuickReply) -> StoredQuickReply:
        return quick_replies.add_quick_reply(self._db, reply)

    def update_quick_reply(self, reply: StoredQuickReply) -> StoredQuickReply:
        return quick_replies.update_quick_reply(self._db, reply)

    def delete_quick_reply(self, reply_id: int) -> None:
        quick_replies.delete_quick_reply(self._db, reply_id)

    # Personas ----------------------------------------------------------------------------------

    def personas(self) -> list[StoredPersona]:
        return personas.list_personas(self._db)

    def get_persona(self, persona_id: int) -> StoredPersona:
        return personas.get_persona(self._db, persona_id)

    def find_persona(self, name: str) -> StoredPersona | None:
        return personas.find_persona(self._db, name)

    def default_persona(self) -> StoredPersona | None:
        return personas.default_persona(self._db)

    def create_persona(
        self, name: str, description: str = "", image: str | None = None, *, default: bool = False
    ) -> StoredPersona:
        return personas.create_persona(self._db, name, description, image, default=default)

    def update_persona(
        self, persona_id: int, name: str, description: str, image: str | None
    ) -> StoredPersona:
        return personas.update_persona(self._db, persona_id, name, description, image)

    def delete_persona(self, persona_id: int) -> None:
        personas.delete_persona(self._db, persona_id)

    def set_default_persona(self, persona_id: int) -> StoredPersona:
        return personas.set_default_persona(self._db, persona_id)

    def set_conversation_persona(self, conv_id: int, persona_id: int) -> StoredConversation:
        return personas.set_conversation_persona(self._db, conv_id, persona_id)

    def persona_conversations(self, persona_id: int) -> int:
        return personas.persona_conversations(self._db, persona_id)

    def import_conversation(
        self,
        conv: Conversation,
        msgs: Iterable[Message],
        *,
        described: Callable[[], Conversation] | None = None,
        settings: Callable[[], ChatSettings] | None = None,
        cast_of: Callable[[], GroupCast] | None = None,
    ) -> StoredConversation:
        """A whole conversation in one transaction: all of it or nothing. Timestamps, speakers,
        alternatives, chosen index and extra dicts are stored as given.

        `msgs` may be a stream (a big chat file read line by line): it is stored in batches, so
        memory stays bounded. `described`, called once the stream is exhausted, gives the
        conversation's final fields (names, dates, extra) when they depend on the messages (its
        `updated_at`, the last activity the conversation is listed by, is kept as given);
        `settings`, called then too, the conversation's settings (a chat file's metadata);
        `cast_of`, then too, a group's cast (fewer than two members: not a group).
        """
        if conv.id is not None:
            raise StoreError(f"conversation {conv.id} already has an id; import it as a new one")
        with self._db.write():
            created = conversations.insert_conversation(self._db, conv)
            assert created.id is not None
            stream = iter(msgs)
            while batch := list(itertools.islice(stream, IMPORT_BATCH)):
                messages.insert_messages(self._db, created.id, batch)
            if described is not None:
                conversations.describe_conversation(self._db, created.id, described())
            if settings is not None and (chosen := settings()) != ChatSettings():
                chat_settings.set_conversation_settings(self._db, created.id, chosen)
            if cast_of is not None and len((group := cast_of()).members) > 1:
                cast.import_cast(self._db, created.id, group)
            return conversations.get_conversation(self._db, created.id)

    # Settings over the model profile (a character's, a conversation's) -------------------------

    def character_settings(self, character_key: str) -> ChatSettings:
        return chat_settings.character_settings(self._db, character_key)

    def set_character_settings(self, character_key: str, settings: ChatSettings) -> None:
        chat_settings.set_character_settings(self._db, character_key, settings)

    def conversation_settings(self, conv_id: int) -> ChatSettings:
        return chat_settings.conversation_settings(self._db, conv_id)

    def set_conversation_settings(self, conv_id: int, settings: ChatSettings) -> None:
        chat_settings.set_conversation_settings(self._db, conv_id, settings)

    # Messages ----------------------------------------------------------------------------------

    def add_message(self, msg: Message) -> StoredMessage:
        """Store a message; bumps the conversation's updated_at and message_count with it."""
        return messages.add_message(self._db, msg)

    def add_messages(self, conv_id: int, msgs: Sequence[Message]) -> list[int]:
        """Append many messages in one transaction (bulk insert); returns their new ids."""
        return messages.insert_messages(self._db, conv_id, msgs)

    def get_message(self, msg_id: int) -> StoredMessage:
        return messages.get_message(self._db, msg_id)

    def update_message_text(
        self, msg_id: int, text: str, segments: list[Segment], edited: bool = True
    ) -> StoredMessage:
        return messages.update_message_text(self._db, msg_id, text, segments, edited)

    def finish_message(
        self,
        msg_id: int,
        text: str,
        segments: list[Segment],
        status: MessageStatus,
        status_reason: str | None = None,
        reasoning: str | None = None,
    ) -> StoredMessage:
        return messages.finish_message(
            self._db, msg_id, text, segments, status, status_reason, reasoning
        )

    def add_alternative(self, msg_id: int, alt: Alternative, choose: bool = True) -> int:
        return messages.add_alternative(self._db, msg_id, alt, choose)

    def choose_alternative(self, msg_id: int, index: int) -> StoredMessage:
        return messages.choose_alternative(self._db, msg_id, index)

    def delete_message(self, msg_id: int) -> None:
        messages.delete_message(self._db, msg_id)

    def restore_message(self, msg: StoredMessage) -> StoredMessage:
        """A deleted message back under its own id (undo)."""
        return messages.restore_message(self._db, msg)

    def set_token_count(self, msg_id: int, model_key: str, tokens: int) -> None:
        messages.set_token_count(self._db, msg_id, model_key, tokens)

    def last_message(self, conv_id: int, model_key: str | None = None) -> StoredMessage | None:
        return messages.last_message(self._db, conv_id, model_key)

    def last_message_by(self, conv_id: int, role: Role) -> StoredMessage | None:
        return messages.last_message_by(self._db, conv_id, role)

    def recent_messages(
        self, conv_id: int, limit: int, model_key: str | None = None
    ) -> list[StoredMessage]:
        """The last `limit` messages, oldest first."""
        return messages.recent_messages(self._db, conv_id, limit, model_key)

    def messages_from(
        self, conv_id: int, first_id: int, limit: int, model_key: str | None = None
    ) -> list[StoredMessage]:
        """Messages with id >= first_id, ascending, at most `limit`."""
        return messages.messages_from(self._db, conv_id, first_id, limit, model_key)

    def messages_between(
        self, conv_id: int, first_id: int, last_id: int, model_key: str | None = None
    ) -> list[StoredMessage]:
        """Messages with first_id <= id <= last_id, ascending."""
        return messages.messages_between(self._db, conv_id, first_id, last_id, model_key)

    def messages_before(
        self, conv_id: int, before_id: int, limit: int, model_key: str | None = None
    ) -> list[StoredMessage]:
        """The `limit` messages just before `before_id`, oldest first (scrolling back)."""
        return messages.messages_before(self._db, conv_id, before_id, limit, model_key)

    def message_count(self, conv_id: int) -> int:
        return messages.message_count(self._db, conv_id)

    def message_numbers(self, conv_id: int, ids: Iterable[int]) -> dict[int, int]:
        """Each id's place in its conversation (1 = the first), as the UI numbers messages."""
        return messages.message_numbers(self._db, conv_id, ids)

    def message_places(self, conv_id: int, ids: Iterable[int]) -> dict[int, tuple[int, str | None]]:
        """Each of `ids` with how many of the conversation's messages have an id up to it, and
        its speaker when it is one of them (None: it is not, deleted or another's)."""
        return messages.message_places(self._db, conv_id, ids)

    def deleted_messages(self, ids: Iterable[int]) -> frozenset[int]:
        """Of `ids`, those of messages deleted (given out once, no message's now; ids are never
        reused): not another conversation's message, nor an id never given out."""
        return messages.deleted_messages(self._db, ids)

    def message_id_at(self, conv_id: int, number: int) -> int | None:
        """The id of the message shown as #`number` in its conversation (1 = the first)."""
        return messages.message_id_at(self._db, conv_id, number)

    def iter_messages(
        self, conv_id: int, batch: int = 500, model_key: str | None = None
    ) -> Iterator[StoredMessage]:
        return messages.iter_messages(self._db, conv_id, batch, model_key)

    # Search ------------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        conversation_id: int | None = None,
        limit: int = 50,
        order: SearchOrder = SearchOrder.RANK,
    ) -> list[SearchHit]:
        """Messages holding every term of `query` (plain text, never query syntax), in every
        conversation or in one; Japanese and Chinese are matched as substrings."""
        return search.search_messages(
            self._db, query, conversation_id=conversation_id, limit=limit, order=order
        )

    def recall(
        self,
        conversation_id: int,
        query: str,
        older_than_id: int,
        limit: int,
        ignore: Iterable[str] = (),
    ) -> list[SearchHit]:
        """Messages of one conversation older than `older_than_id` that share content words
        (in any of their forms) with `query`, best first (BM25; more shared words rank higher;
        words in too many messages to tell them apart are left out, and the words of the
        names in `ignore`, the speakers'). One call per turn (issue 16, recall)."""
        return search.search_messages(
            self._db,
            query,
            conversation_id=conversation_id,
            before_id=older_than_id,
            limit=limit,
            mode=SearchMode.ANY,
            ignore=ignore,
        )

    def recall_terms(self, query: str, ignore: Iterable[str] = ()) -> list[Term]:
        """The terms `recall` looks for in `query` (the common words left out)."""
        return search.recall_terms_used(self._db, query, ignore)

    def recall_rarity(self, terms: Sequence[Term]) -> dict[str, float]:
        """How rare each of recall's spaced terms is in the archive (folded term -> its
        inverse document frequency): recall quotes the pieces that hold the rarest."""
        return search.recall_term_rarity(self._db, terms)

    def neighbours(
        self, conv_id: int, ids: Iterable[int], before_id: int, model_key: str | None = None
    ) -> dict[int, tuple[StoredMessage | None, StoredMessage | None]]:
        """Each message's previous and next message in the conversation, older than
        `before_id` (recall quotes a line with its reply)."""
        with self._db.read():
            return messages.neighbours(self._db, conv_id, ids, before_id, model_key)

    def next_messages(
        self, conv_id: int, ids: Iterable[int], before_id: int, model_key: str | None = None
    ) -> dict[int, StoredMessage | None]:
        """Each message's next message in the conversation, older than `before_id` (recall
        quotes the reply a question got): half what `neighbours` reads."""
        with self._db.read():
            return messages.next_messages(self._db, conv_id, ids, before_id, model_key)

    def story_times(self, conv_id: int, ids: Iterable[int]) -> dict[int, str]:
        """Each message's in-story time, from the chapter that covers it (where one says)."""
        with self._db.read():
            return memory_rows.story_times(self._db, conv_id, ids)

    def scene_dates(self, conv_id: int, first_id: int, last_id: int) -> list[str]:
        """The scene dates of a range of messages in story order (the one in force at its
        first message, then those its openings give): a chapter's in-story time."""
        with self._db.read():
            return memory_rows.scene_dates(self._db, conv_id, first_id, last_id)

    # Semantic recall: message vectors (store/vectors.py) -------------------------------------

    def vector_search_unavailable(self) -> str | None:
        """None when stored vectors can be ranked (sqlite-vec loaded), else why not, in one
        line. Loaded on first use: a store without semantic recall never loads it."""
        if self._vector_search is None and self._vectors_unavailable is None:
            try:
                self._vector_search = VectorSearch.open(self.path, self._db.busy_timeout_s)
            except VectorsUnavailable as exc:
                self._vectors_unavailable = str(exc)
        return self._vectors_unavailable

    def similar(
        self,
        conv_id: int,
        model_key: str,
        query: Sequence[float],
        older_than_id: int,
        limit: int,
    ) -> list[SimilarHit]:
        """Messages of one conversation older than `older_than_id` whose vectors (for
        `model_key`) are closest to `query`, closest first; none when sqlite-vec is not
        available. A vector of a text since changed is never used."""
        search = self._vector_search if self.vector_search_unavailable() is None else None
        if search is None:
            return []
        # Outside the connection's lock: the scan can take a few hundred ms, and the UI's
        # reads must not wait for it (the search's own lock keeps it from its close).
        nearest = search.nearest(model_key, conv_id, query, older_than_id, limit)
        with self._db.read():
            return vectors.similar_hits(self._db, nearest)

    def vectors_pending(self, model_key: str, limit: int) -> list[PendingText]:
        """Messages with text and no vector for `model_key` yet, newest first."""
        return vectors.pending(self._db, model_key, limit)

    def put_vectors(
        self, model_key: str, items: Sequence[tuple[PendingText, Sequence[float]]]
    ) -> int:
        """Store vectors for messages that still have the text they were computed from."""
        return vectors.put(self._db, model_key, items)

    def vector_counts(self, model_key: str) -> VectorCounts:
        return vectors.counts(self._db, model_key)

    # Images ------------------------------------------------------------------------------------

    def put_image(self, data: bytes, mime: str, width: int, height: int) -> str:
        return images.put_image(self._db, data, mime, width, height)

    def get_image(self, digest: str) -> tuple[bytes, str]:
        return images.get_image(self._db, digest)

    # Chapters and synopsis ---------------------------------------------------------------------

    def add_chapter(self, chapter: Chapter, job_id: int | None = None) -> StoredChapter:
        return memory_rows.add_chapter(self._db, chapter, job_id)

    def refold_chapter(self, old_id: int, new: Chapter, job_id: int | None = None) -> StoredChapter:
        return memory_rows.refold_chapter(self._db, old_id, new, job_id)

    def refold_chapters(
        self, old_ids: Sequence[int], new: Sequence[Chapter], job_id: int | None = None
    ) -> list[StoredChapter]:
        return memory_rows.refold_chapters(self._db, old_ids, new, job_id)

    def stale_chapters(self, conv_id: int, first_id: int, last_id: int) -> list[StoredChapter]:
        return memory_rows.stale_chapters(self._db, conv_id, first_id, last_id)

    def synopsis_chapters_after(
        self, conv_id: int, after_id: int, through_id: int, limit: int
    ) -> list[StoredChapter]:
        return memory_rows.synopsis_chapters_after(self._db, conv_id, after_id, through_id, limit)

    def rebuild_base(self, conv_id: int, before_id: int) -> StoredSynopsis | None:
        return memory_rows.rebuild_base(self._db, conv_id, before_id)

    def store_chapter(
        self,
        chapter: Chapter,
        entries: Sequence[LedgerEntry] = (),
        endings: Sequence[LedgerEnding] = (),
        *,
        job_id: int | None = None,
        then: Sequence[FoldJob] = (),
    ) -> StoredChapter:
        """A chapter with its ledger changes, its job done and the jobs `then` queued (the
        rest of a range too large for one call), in one transaction (ledger_rows.store_chapter):
        a reader never sees the chapter's job done without the rest of its range queued. When
        a `then` job cannot be queued, this raises StoreError and nothing is stored: the
        chapter is rolled back and its job stays open."""
        with self._db.write():
            stored = ledger_rows.store_chapter(self._db, chapter, entries, endings, job_id=job_id)
            self._queue(then)
            return stored

    def store_refold(
        self,
        old_ids: Sequence[int],
        new: Sequence[NewChapter],
        job_id: int | None = None,
        *,
        then: Sequence[FoldJob] = (),
    ) -> list[StoredChapter]:
        """A refold with its ledger changes, its job done and the jobs `then` queued (the
        refolds of quoted chapters), in one transaction (ledger_rows.store_refold). This
        raises StoreError, and nothing is stored or queued, when the job is done already (its
        chapter landed first) or a `then` job cannot be queued: the chapters are rolled back
        (the stale ones stay live) and the job stays open."""
        with self._db.write():
            stored = ledger_rows.store_refold(self._db, old_ids, new, job_id)
            self._queue(then)
            return stored

    def _queue(self, jobs: Sequence[FoldJob]) -> None:
        for job in jobs:
            fold_jobs.enqueue_fold(self._db, job)

    def retire_chapters(
        self, conv_id: int, ids: Sequence[int], job_id: int | None = None
    ) -> Retirement:
        """Chapters whose messages were all deleted leave the memory, their live ledger entries
        end, a synopsis that held one goes stale, the job is done: one transaction
        (ledger_rows.retire_chapters)."""
        return ledger_rows.retire_chapters(self._db, conv_id, ids, job_id)

    def ledger(self, conv_id: int, *, include_ended: bool = False) -> list[StoredLedgerEntry]:
        return ledger_rows.ledger(self._db, conv_id, include_ended=include_ended)

    def get_chapter(self, chapter_id: int) -> StoredChapter:
        return memory_rows.get_chapter(self._db, chapter_id)

    def chapters(
        self, conv_id: int, include_in_synopsis: bool = False, include_superseded: bool = False
    ) -> list[StoredChapter]:
        return memory_rows.chapters(self._db, conv_id, include_in_synopsis, include_superseded)

    def chapter_ranges(self, conv_id: int, ids: Iterable[int]) -> dict[int, tuple[int, int]]:
        """Each of `ids` that is a chapter of the conversation: its first and last message ids
        (memory_rows.chapter_ranges)."""
        with self._db.read():
            return memory_rows.chapter_ranges(self._db, conv_id, ids)

    def mark_chapters_stale(self, conv_id: int, message_id: int) -> list[int]:
        return memory_rows.mark_chapters_stale(self._db, conv_id, message_id)

    def add_synopsis(
        self, synopsis: Synopsis, folded_chapter_ids: Sequence[int], job_id: int | None = None
    ) -> StoredSynopsis:
        return memory_rows.add_synopsis(self._db, synopsis, folded_chapter_ids, job_id)

    def current_synopsis(self, conv_id: int) -> StoredSynopsis | None:
        return memory_rows.current_synopsis(self._db, conv_id)

    def synopsis_versions(self, conv_id: int) -> list[StoredSynopsis]:
        return memory_rows.synopsis_versions(self._db, conv_id)

    # Memory state ------------------------------------------------------------------------------

    def memory_state(self, conv_id: int) -> MemoryState:
        return memory_rows.memory_state(self._db, conv_id)

    def set_memory_state(self, state: MemoryState) -> MemoryState:
        return memory_rows.set_memory_state(self._db, state)

    def memory_rows(
        self, conv_id: int, *, versions: bool = False, jobs: Sequence[FoldStatus] = ()
    ) -> MemoryRows:
        """The rows of the conversation's memory in one read transaction (records.MemoryRows):
        the memory state, the retired count, the current synopsis, the live chapters and the
        ledger; `versions`: every synopsis version too; `jobs`: the fold jobs in these
        statuses too. A fold committed by another instance (or thread) meanwhile is in all of
        them or in none. Holds no write lock: in WAL mode a writer commits alongside, and
        this read keeps the snapshot its first statement saw."""
        db = self._db
        with db.read():
            return MemoryRows(
                state=memory_rows.memory_state(db, conv_id),
                retired=memory_rows.retired_count(db, conv_id),
                synopsis=memory_rows.current_synopsis(db, conv_id),
                chapters=memory_rows.chapters(db, conv_id),
                ledger=ledger_rows.ledger(db, conv_id, include_ended=True),
                live=ledger_rows.ledger(db, conv_id),
                versions=memory_rows.synopsis_versions(db, conv_id) if versions else [],
                jobs=fold_jobs.fold_jobs(db, conv_id, jobs) if jobs else [],
            )

    # Fold jobs ---------------------------------------------------------------------------------

    def enqueue_fold(self, job: FoldJob) -> StoredFoldJob:
        return fold_jobs.enqueue_fold(self._db, job)

    def claim_next_fold(
        self,
        now: datetime | None = None,
        *,
        claimer: str | None = None,
        lease_s: float = fold_jobs.DEFAULT_LEASE_S,
    ) -> StoredFoldJob | None:
        return fold_jobs.claim_next_fold(self._db, now, claimer=claimer, lease_s=lease_s)

    def renew_lease(
        self,
        job_id: int,
        claimer: str,
        lease_s: float = fold_jobs.DEFAULT_LEASE_S,
        *,
        now: datetime | None = None,
    ) -> bool:
        return fold_jobs.renew_lease(self._db, job_id, claimer, lease_s, now)

    def hasten_folds(self, job_ids: Iterable[int], *, now: datetime | None = None) -> list[int]:
        return fold_jobs.hasten(self._db, job_ids, now)

    def requeue_abandoned(
        self, gone: Callable[[str], bool], *, now: datetime | None = None
    ) -> list[int]:
        return fold_jobs.requeue_abandoned(self._db, gone, now)

    def get_fold(self, job_id: int) -> StoredFoldJob:
        return fold_jobs.get_fold(self._db, job_id)

    def fail_fold(self, job_id: int, error: str, retry_at: datetime | None = None) -> StoredFoldJob:
        return fold_jobs.fail_fold(self._db, job_id, error, retry_at)

    def finish_fold(self, job_id: int) -> StoredFoldJob:
        return fold_jobs.finish_fold(self._db, job_id)

    def release_fold(self, job_id: int) -> StoredFoldJob:
        return fold_jobs.release_fold(self._db, job_id)

    def requeue_running(self, claimed_before: datetime | None = None) -> list[int]:
        return fold_jobs.requeue_running(self._db, claimed_before)

    def fold_jobs(
        self, conv_id: int, statuses: Iterable[FoldStatus] | None = None
    ) -> list[StoredFoldJob]:
        return fold_jobs.fold_jobs(self._db, conv_id, statuses)

    def next_fold_due(self) -> datetime | None:
        return fold_jobs.next_fold_due(self._db)

    # Metrics -----------------------------------------------------------------------------------

    def add_turn_metrics(self, conv_id: int, message_id: int | None, turn: TurnMetrics) -> int:
        return metrics.add_turn_metrics(self._db, conv_id, message_id, turn)

    def last_turn_metrics(self, conv_id: int) -> TurnMetrics | None:
        return metrics.last_turn_metrics(self._db, conv_id)

    def turn_metrics(self, conv_id: int, limit: int) -> list[TurnMetricsRecord]:
        return metrics.turn_metrics(self._db, conv_id, limit)
