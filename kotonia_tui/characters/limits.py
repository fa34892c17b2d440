"""How big a card may be: bounds that keep one hostile card from stalling the app.

A card is read into memory, rendered with its macros, tokenized and shown on screen; each of
those costs time in proportion to its size. Real cards stay far below these bounds (a long
description is tens of thousands of characters, a generous card has a few dozen greetings);
a card past one is refused with a one-line error naming the file and the field, never cut.
"""

from __future__ import annotations

MAX_TEXT_CHARS = 200_000  # one text field, one greeting or one lorebook entry's content
MAX_NAME_CHARS = 200  # the name and nickname, which every {{char}} macro repeats
MAX_GREETINGS = 500  # alternate greetings (each is a row on the conversations screen)
MAX_LORE_ENTRIES = 10_000
MAX_EXPANDED_CHARS = 1_000_000  # a field with its macros filled in, and the whole setup
