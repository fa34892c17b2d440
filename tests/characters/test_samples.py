"""The sample characters in `characters/` load, have pictures and good role-play material."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from PIL import Image
from PIL.PngImagePlugin import PngImageFile

from kotonia_tui.characters import SpecVersion, load_card, load_cards, render_setup
from kotonia_tui.characters.sample_art import SAMPLE_ART, render_png
from kotonia_tui.domain import Persona

SHIPPED = Path(__file__).resolve().parents[2] / "characters"
KEYS = ["rowan-ashby", "tsukishima-tsumugi", "lin-wanzhou"]


def test_the_shipped_folder_loads_without_problems():
    cards, problems = load_cards([SHIPPED])
    assert problems == []
    assert {c.key for c in cards} >= set(KEYS)


@pytest.mark.parametrize("key", KEYS)
def test_sample_card_is_complete(key):
    path = SHIPPED / f"{key}.png"
    card = load_card(path)
    assert card.spec is SpecVersion.V3
    assert card.first_mes and card.alternate_greetings and card.mes_example
    assert "<START>" in card.mes_example
    assert card.creator_notes
    book = card.character_book
    assert book is not None
    assert any(e.constant for e in book.entries)
    assert sum(1 for e in book.entries if e.keys and not e.constant) >= 3
    # A real picture a terminal can show, and both card chunks for other apps.
    assert card.image is not None
    with Image.open(io.BytesIO(card.image.data)) as image:
        image.load()
        assert isinstance(image, PngImageFile)
        assert image.size == (400, 600)
        v2 = json.loads(base64.b64decode(image.text["chara"]))
        assert v2["spec"] == "chara_card_v2"
        assert v2["data"]["name"] == card.name
        assert "ccv3" in image.text
    setup = render_setup(card, Persona(name="Alex"))
    assert card.creator_notes not in setup.system_text
    assert setup.greetings[0]


def test_rowan_has_a_lie_and_a_truth():
    card = load_card(SHIPPED / "rowan-ashby.png")
    for text in (card.description, card.creator_notes):
        assert "Grey Heron" in text
        assert "Tobias Crane" in text
    keys = {k for e in card.character_book.entries for k in e.keys}
    assert "Grey Heron" in keys


def test_tsumugi_speaks_japanese():
    card = load_card(SHIPPED / "tsukishima-tsumugi.png")
    for text in (card.description, card.first_mes, card.alternate_greetings[0]):
        assert any("\u3040" <= ch <= "\u30ff" for ch in text)  # kana: Japanese, not Chinese


def test_wanzhou_speaks_chinese():
    card = load_card(SHIPPED / "lin-wanzhou.png")
    for text in (card.description, card.first_mes, card.creator_notes):
        assert any("\u4e00" <= ch <= "\u9fff" for ch in text)
        assert not any("\u3040" <= ch <= "\u30ff" for ch in text)


def test_shipped_cards_match_their_sources():
    sources = Path(__file__).resolve().parents[2] / "assets" / "sample_cards"
    for key in KEYS:
        source = load_card(sources / f"{key}.json")
        shipped = load_card(SHIPPED / f"{key}.png")
        assert shipped.to_json_dict() == source.to_json_dict()


def test_sample_art_draws_every_character():
    for draw in SAMPLE_ART.values():
        data = render_png(draw)
        with Image.open(io.BytesIO(data)) as image:
            assert image.size == (400, 600)
            # Not a blank canvas: a drawing has many colours.
            assert len(image.getcolors(maxcolors=1_000_000) or []) > 500
