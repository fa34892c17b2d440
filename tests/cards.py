"""Small character cards the tests write into the user's card folder."""

from __future__ import annotations

import json

from kotonia_tui.config import app_dirs

SHORT_CARD_KEY = "wren"


def write_short_card(**fields: object) -> str:
    """A small card in the user's folder: the tiny tokenizer makes long setups expensive.
    `fields` are added to (or replace) the card's data."""
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    card = {
        "spec": "chara_card_v2",
        "spec_version": "2.0",
        "data": {
            "name": "Wren",
            "description": "Wren keeps the lighthouse.",
            "personality": "calm",
            "scenario": "",
            "first_mes": "Welcome to the lighthouse.",
            "mes_example": "",
            **fields,
        },
    }
    (folder / f"{SHORT_CARD_KEY}.json").write_text(json.dumps(card), encoding="utf-8")
    return SHORT_CARD_KEY
