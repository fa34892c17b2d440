"""Which cards' setups leave the story too little room in a window (`kotonia doctor --load`).

A card's setup is sent with every turn and never folded. When setup and reply leave less room
than the memory's budgets want, the budgets shrink with it (memory.budgets.Budgets.with_setup);
this says so per card, with the figures, before the first conversation runs into it.
"""

from __future__ import annotations

from kotonia_tui.characters import CardError
from kotonia_tui.chat.library import CharacterLibrary
from kotonia_tui.config import Settings
from kotonia_tui.engine import Engine
from kotonia_tui.memory.budgets import Budgets


def squeezed_cards(
    engine: Engine, settings: Settings, library: CharacterLibrary
) -> list[tuple[str, str]]:
    """(card key, what its setup leaves) for each card whose setup squeezes the story."""
    window = Budgets.for_window(engine.n_ctx, engine.profile.reply_max_tokens, settings)
    found = []
    for card in library.cards:
        try:
            setup = library.setup(card, settings.persona)
        except CardError:
            continue  # a card that cannot be set up is reported as broken elsewhere
        fitted = window.with_setup(engine.count_tokens(setup.system_text))
        if fitted.squeezed:
            found.append((card.key, fitted.room_note(setup.display_name)))
    return found
