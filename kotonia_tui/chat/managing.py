"""Managing conversations without the model: rename, delete (and undo), duplicate, branch,
import, export, and the persona a conversation is played as.

The app uses this whether or not the model loaded. A conversation deleted in the app is hidden
at once and removed for good when the app closes, so the deletion can be undone until then
(the next start removes what a crashed session left hidden). The command line deletes for good.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kotonia_tui.characters import CharacterCard
from kotonia_tui.chat.derived_copies import DerivedCopies
from kotonia_tui.chat.errors import ManageError
from kotonia_tui.chat.importing import ImportedChat, import_chat_file
from kotonia_tui.chat.library import CharacterLibrary
from kotonia_tui.chat.personas import PersonaBook
from kotonia_tui.chatfiles import write_sillytavern
from kotonia_tui.domain import Conversation, StoredConversation
from kotonia_tui.memory.numbering import renumber
from kotonia_tui.memory.structured import retarget_structure
from kotonia_tui.safe_files import replacing
from kotonia_tui.store import Store
from kotonia_tui.store.branching import Branched

MAX_TITLE_CHARS = 200


def conversation_title(conv: StoredConversation) -> str:
    """How a conversation is named to the user: its title, or its number."""
    return conv.title or f"Conversation {conv.id}"


class ConversationManager:
    """Conversation changes over one store, with this session's deletions kept for undo."""

    def __init__(self, store: Store, library: CharacterLibrary, personas: PersonaBook) -> None:
        self.store = store
        self.library = library
        self.personas = personas
        self._deleted: list[int] = []  # this session's, newest last

    # ---- rename, delete, undo ---------------------------------------------------------------

    def rename(self, conv_id: int, title: str) -> StoredConversation:
        title = " ".join(title.split())
        if len(title) > MAX_TITLE_CHARS:
            raise ManageError(f"a title is at most {MAX_TITLE_CHARS} characters ({len(title):,})")
        return self.store.rename_conversation(conv_id, title)

    def delete(self, conv_id: int) -> StoredConversation:
        """Hide the conversation (undo brings it back until the app closes)."""
        conv = self.store.get_conversation(conv_id)
        self.store.hide_conversation(conv_id)
        self._deleted.append(conv_id)
        return conv

    def undo_delete(self) -> StoredConversation | None:
        """Bring back the conversation deleted last (None: nothing to undo)."""
        if not self._deleted:
            return None
        return self.store.unhide_conversation(self._deleted.pop())

    def close(self) -> list[int]:
        """Remove this session's deletions for good (the app is closing, its engine closed:
        no state of theirs is saved after this), with their saved states."""
        removed = self.store.purge_hidden(self._deleted) if self._deleted else []
        self._deleted.clear()
        DerivedCopies().forget_conversations(self.store.path, removed)
        return removed

    def delete_now(self, conv_id: int) -> StoredConversation:
        """Delete for good at once (`kotonia delete`), with its saved states."""
        conv = self.store.get_conversation(conv_id)
        self.store.delete_conversation(conv.id)
        DerivedCopies().forget_conversations(self.store.path, [conv.id])
        return conv

    def purge_leftovers(self) -> list[int]:
        """At start: what a session that ended without closing (a crash) left hidden."""
        removed = self.store.purge_hidden()
        DerivedCopies().forget_conversations(self.store.path, removed)
        return removed

    # ---- duplicate and branch ---------------------------------------------------------------

    def duplicate(self, conv_id: int, title: str = "") -> Branched:
        """A copy of the whole conversation, memory included."""
        source = self.store.get_conversation(conv_id)
        return self._branch(source, None, title or f"{conversation_title(source)} (copy)", None)

    def branch(self, conv_id: int, message_id: int, title: str = "") -> Branched:
        """A new conversation sharing the messages up to and including `message_id`, and the
        chapters and synopsis that cover them (store/branching.py)."""
        source = self.store.get_conversation(conv_id)
        number = self.store.message_numbers(conv_id, [message_id]).get(message_id)
        default = f"{conversation_title(source)} (branch at #{number})"
        return self._branch(source, message_id, title or default, number)

    def branch_at_number(self, conv_id: int, number: int, title: str = "") -> Branched:
        """`branch` at the message shown as #`number` (1 = the first)."""
        self.store.get_conversation(conv_id)  # an unknown id says so before its messages
        message_id = self.store.message_id_at(conv_id, number)
        if message_id is None:
            count = self.store.message_count(conv_id)
            raise ManageError(
                f"conversation {conv_id} has messages #1 to #{count}; there is no #{number}"
            )
        return self.branch(conv_id, message_id, title)

    def _branch(
        self, source: StoredConversation, through: int | None, title: str, number: int | None
    ) -> Branched:
        conv = Conversation(
            character_key=source.character_key,
            character_name=source.character_name,
            persona_name=source.persona_name,
            persona_description=source.persona_description,
            persona_id=source.persona_id,
            title=" ".join(title.split())[:MAX_TITLE_CHARS],
            extra={"branch_of": {"conversation": source.id, "through": number}},
        )
        # The copied memory cites the copies (memory/numbering.py rewrites its references,
        # memory/structured.py the evidence ids of the chapters' items).
        return self.store.branch_conversation(
            source.id, through, conv, renumber, retarget_structure
        )

    # ---- personas ---------------------------------------------------------------------------

    def set_persona(self, conv_id: int, persona_id: int) -> StoredConversation:
        """Play the conversation as another persona from its next turn."""
        return self.store.set_conversation_persona(conv_id, persona_id)

    # ---- files ------------------------------------------------------------------------------

    def import_file(self, path: Path, card: CharacterCard | None = None) -> ImportedChat:
        """Import a chat file as `kotonia import` does: filed under the card its character's
        name matches; when none matches, under `card` (the one the player was looking at)."""
        imported = import_chat_file(
            self.store,
            path,
            self.personas.default().name,
            match=self._matcher(card),
            personas=self.personas,
        )
        return imported

    def _matcher(self, fallback: CharacterCard | None) -> Callable[[str], CharacterCard | None]:
        def match(name: str) -> CharacterCard | None:
            return self.library.match(name) or fallback

        return match

    def export_file(self, conv_id: int, path: Path) -> int:
        """Write the conversation as a SillyTavern `.jsonl` chat; returns the message count.
        The file is replaced whole or not at all."""
        conv = self.store.get_conversation(conv_id)
        with replacing(path, stream_ok=True) as out:
            return write_sillytavern(
                conv,
                self.store.iter_messages(conv_id),
                out,
                self.store.get_image,
                self.store.conversation_settings(conv_id),
                self.store.cast(conv_id),
            )
