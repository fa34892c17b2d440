"""Search results as the search screen and `kotonia search` show them.

The store finds the messages (store/search.py); this adds what a result line needs: the
conversation it is in, the message's place in it (#12, as the chat numbers messages) and a
snippet around the first match with the matches marked. It reads only the store, so searching
works without the model.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from kotonia_tui.domain import StoredConversation
from kotonia_tui.search_text import Snippet, snippet
from kotonia_tui.store import SearchHit, SearchOrder, Store
from kotonia_tui.terms import split_terms

SNIPPET_WIDTH = 160


@dataclass(frozen=True)
class SearchResult:
    hit: SearchHit
    conversation: StoredConversation
    number: int  # the message's place in its conversation (1 = the first)
    snippet: Snippet


def search(
    store: Store,
    query: str,
    *,
    conversation_id: int | None = None,
    limit: int = 50,
    order: SearchOrder = SearchOrder.RANK,
    snippet_width: int = SNIPPET_WIDTH,
) -> list[SearchResult]:
    """The messages holding every word of `query`, best first (or newest first)."""
    hits = store.search(query, conversation_id=conversation_id, limit=limit, order=order)
    terms = split_terms(query)
    by_conversation: dict[int, list[int]] = defaultdict(list)
    for hit in hits:
        by_conversation[hit.conversation_id].append(hit.message_id)
    conversations = {conv_id: store.get_conversation(conv_id) for conv_id in by_conversation}
    numbers: dict[int, int] = {}
    for conv_id, ids in by_conversation.items():
        numbers.update(store.message_numbers(conv_id, ids))
    return [
        SearchResult(
            hit=hit,
            conversation=conversations[hit.conversation_id],
            number=numbers.get(hit.message_id, 0),
            snippet=snippet(hit.text, terms, snippet_width),
        )
        for hit in hits
    ]
