"""Character cards: V1/V2/V3 JSON, PNG (`chara`/`ccv3` chunks), CHARX and WebP (EXIF) files,
lorebooks, macros.

`load_card` / `load_cards` read cards, `render_setup` turns one into the text the model sees,
`select_entries` + `render_lore` pick the lorebook entries for a turn, and the writers save cards.
No Textual, no model, no SQL here.
"""

from kotonia_tui.characters.card import CardAsset, CardImage, CharacterCard, SpecVersion
from kotonia_tui.characters.character_note import CharacterNote
from kotonia_tui.characters.errors import CardError, CardRepaired, CardShadowed
from kotonia_tui.characters.loader import CARD_SUFFIXES, load_card, load_cards
from kotonia_tui.characters.lore_selection import (
    BookToMatch,
    LoreFiring,
    LoreSelection,
    RegexGuard,
    select_entries,
    select_from_books,
)
from kotonia_tui.characters.lorebook import (
    DEFAULT_MATCH_WHOLE_WORDS,
    Lorebook,
    LoreEntry,
    render_lore,
)
from kotonia_tui.characters.macros import apply_macros
from kotonia_tui.characters.setup import DEFAULT_SYSTEM_PROMPT, CharacterSetup, render_setup
from kotonia_tui.characters.writers import write_charx, write_json_card, write_png_card

__all__ = [
    "CARD_SUFFIXES",
    "DEFAULT_MATCH_WHOLE_WORDS",
    "DEFAULT_SYSTEM_PROMPT",
    "BookToMatch",
    "CardAsset",
    "CardError",
    "CardImage",
    "CardRepaired",
    "CardShadowed",
    "CharacterCard",
    "CharacterNote",
    "CharacterSetup",
    "LoreEntry",
    "LoreFiring",
    "LoreSelection",
    "Lorebook",
    "RegexGuard",
    "SpecVersion",
    "apply_macros",
    "load_card",
    "load_cards",
    "render_lore",
    "render_setup",
    "select_entries",
    "select_from_books",
    "write_charx",
    "write_json_card",
    "write_png_card",
]
