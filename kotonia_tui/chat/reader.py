"""Reading conversations without the model: listings, pages of messages, message numbers.

The TUI reads through this whether or not the model loaded, so a player whose model failed to
load can still open and read every conversation. Conversations are matched to cards by key, or
by the character's name for chats filed under a name (see `CharacterLibrary.card_of`).
"""

from __future__ import annotations

from collections.abc import Sequence

from kotonia_tui.characters import CharacterCard
from kotonia_tui.chat.library import CharacterLibrary
from kotonia_tui.chat.numbering import cited_numbers
from kotonia_tui.chat.search import SearchResult, search
from kotonia_tui.domain import CastMember, StoredConversation, StoredMessage
from kotonia_tui.store import SearchOrder, Store


class ConversationReader:
    """Read-only access to the stored conversations and the cards they belong to."""

    def __init__(self, store: Store, library: CharacterLibrary) -> None:
        self.store = store
        self.library = library

    def conversation(self, conv_id: int) -> StoredConversation:
        return self.store.get_conversation(conv_id)

    def cast(self, conv_id: int) -> list[CastMember]:
        """A group's members in their order; a one-card chat's card alone."""
        return self.store.cast(conv_id)

    def casts(self) -> dict[int, list[CastMember]]:
        """Every group conversation's cards in their order, by conversation id (one read)."""
        return self.store.casts()

    def conversations_of(self, card: CharacterCard) -> list[StoredConversation]:
        """The card's conversations, newest first, including chats filed under its name and
        the groups it is a member of (a group is listed under each of its cards)."""
        casts = self.store.casts()

        def is_its(conv: StoredConversation) -> bool:
            members = [(m.character_key, m.character_name) for m in casts.get(conv.id, [])]
            for key, name in members or [(conv.character_key, conv.character_name)]:
                found = self.library.card_of(key, name)
                if found is not None and found.key == card.key:
                    return True
            return False

        return [conv for conv in self.store.list_conversations() if is_its(conv)]

    def messages(
        self, conv_id: int, limit: int = 200, before_id: int | None = None
    ) -> list[StoredMessage]:
        """The newest `limit` messages (or the `limit` before `before_id`), oldest first."""
        if before_id is None:
            return self.store.recent_messages(conv_id, limit)
        return self.store.messages_before(conv_id, before_id, limit)

    def messages_from(self, conv_id: int, first_id: int, limit: int) -> list[StoredMessage]:
        """Up to `limit` messages from `first_id` on, oldest first (a page opened at a message
        a search found)."""
        return self.store.messages_from(conv_id, first_id, limit)

    def search(
        self,
        query: str,
        *,
        conversation_id: int | None = None,
        limit: int = 50,
        order: SearchOrder = SearchOrder.RANK,
    ) -> list[SearchResult]:
        """Every conversation's messages (or one's) holding every word of `query`."""
        return search(self.store, query, conversation_id=conversation_id, limit=limit, order=order)

    def message_numbers(self, conv_id: int, ids: Sequence[int]) -> dict[int, int]:
        """Each message id's place in its conversation (1 = the first), as the UI shows it."""
        return self.store.message_numbers(conv_id, ids)

    def cited_numbers(self, conv_id: int, ids: Sequence[int]) -> dict[int, int]:
        """The places of those of the message ids `ids` still stored in the conversation (what
        the memory cites: one deleted since is left out, and said in words)."""
        return cited_numbers(self.store, conv_id, ids)
