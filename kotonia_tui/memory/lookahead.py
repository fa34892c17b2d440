"""The next turn as the fold policy will see it, before the player has written it.

When a reply ends, the turn after it is planned with a stand-in for the player's next message,
so what that turn would cut can be carried (quoted, chat/fold/quote_first.py) and its new
prompt prewarmed while the player reads and types. The stand-in is as long as the longest of
the player's recent messages: a longer message than that still finds the turn carrying what
it cuts at once, only without the head start; a shorter one had its quotes a turn early,
which the chronicler's chapters replace all the same.
"""

from __future__ import annotations

from collections.abc import Sequence

from kotonia_tui.memory.policy import WindowMessage

RECENT_USER_MESSAGES = 8  # how many of the player's latest messages the stand-in is sized on
# The stand-in when the window holds none of the player's messages (a chat that opens with
# the character): about two lines of chat.
DEFAULT_NEXT_TOKENS = 64


def expected_next_tokens(user_message_tokens: Sequence[int]) -> int:
    """Tokens to plan the player's next message with: the longest of their recent messages
    (`user_message_tokens`, oldest first), or DEFAULT_NEXT_TOKENS when there are none."""
    recent = list(user_message_tokens)[-RECENT_USER_MESSAGES:]
    return max(recent) if recent else DEFAULT_NEXT_TOKENS


def with_next_message(window: Sequence[WindowMessage], tokens: int) -> list[WindowMessage]:
    """The window with a stand-in next message after its newest (an id no stored message in
    it has: one past the newest)."""
    items = list(window)
    next_id = (items[-1].id + 1) if items else 1
    return [*items, WindowMessage(next_id, tokens)]
