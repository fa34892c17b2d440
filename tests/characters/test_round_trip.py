"""Read -> write -> read keeps every field, including ones this app does not know."""

from __future__ import annotations

import base64
import io
import json
import zipfile

import pytest
from PIL import Image
from PIL.PngImagePlugin import PngImageFile

from kotonia_tui.characters import (
    CardError,
    SpecVersion,
    load_card,
    write_charx,
    write_json_card,
    write_png_card,
)

from .builders import json_card, picture, v2_card, v3_card

BOOK = {
    "name": "Harbour",
    "scan_depth": 4,
    "token_budget": 300,
    "recursive_scanning": True,
    "extensions": {"world": "harbour"},
    "vendor_book_field": {"kept": True},
    "entries": [
        {
            "keys": ["lighthouse"],
            "secondary_keys": ["storm"],
            "selective": True,
            "content": "The lighthouse has not been lit for years.",
            "enabled": True,
            "insertion_order": 5,
            "case_sensitive": True,
            "constant": False,
            "priority": 3,
            "position": "after_char",
            "name": "Lighthouse",
            "comment": "for the storm scenes",
            "id": 7,
            "extensions": {"match_whole_words": False, "depth": 4, "vendor": [1, 2]},
            "vendor_entry_field": "kept",
        }
    ],
}


def _rich_v3() -> dict:
    card = v3_card(
        "Mira",
        nickname="Mi",
        group_only_greetings=["Hello, all of you."],
        alternate_greetings=["Back again?"],
        extensions={"depth_prompt": {"prompt": "x", "depth": 4}, "fav": True},
        character_book=BOOK,
        creator_notes_multilingual={"ja": "メモ"},
        vendor_data_field={"nested": ["a", 1, None]},
        assets=[{"type": "icon", "uri": "ccdefault:", "name": "main", "ext": "png", "x": 1}],
    )
    card["vendor_root_field"] = "kept at the root"
    return card


def _same_content(a, b) -> None:
    assert a.to_json_dict() == b.to_json_dict()


def test_json_round_trip_keeps_unknown_fields_and_extensions(tmp_path):
    original = load_card(json_card(tmp_path / "mira.json", _rich_v3()))
    out = tmp_path / "copy.json"
    write_json_card(original, out)
    again = load_card(out)
    _same_content(original, again)
    written = json.loads(out.read_text(encoding="utf-8"))
    assert written["vendor_root_field"] == "kept at the root"
    assert written["data"]["vendor_data_field"] == {"nested": ["a", 1, None]}
    assert written["data"]["creator_notes_multilingual"] == {"ja": "メモ"}
    assert written["data"]["extensions"]["depth_prompt"] == {"prompt": "x", "depth": 4}
    book = written["data"]["character_book"]
    assert book["vendor_book_field"] == {"kept": True}
    assert book["entries"][0]["vendor_entry_field"] == "kept"
    assert book["entries"][0]["extensions"]["vendor"] == [1, 2]
    assert written["data"]["assets"][0]["x"] == 1


def test_png_round_trip_writes_both_chunks_and_keeps_everything(tmp_path):
    original = load_card(json_card(tmp_path / "mira.json", _rich_v3()))
    out = tmp_path / "mira.png"
    write_png_card(original, picture("PNG", "purple", (40, 60)), out)
    again = load_card(out)
    _same_content(original, again)
    assert again.spec is SpecVersion.V3
    # An independent reader (Pillow) sees a valid picture and both chunks.
    with Image.open(out) as image:
        assert image.size == (40, 60)
        image.load()
        assert isinstance(image, PngImageFile)
        v3 = json.loads(base64.b64decode(image.text["ccv3"]))
        v2 = json.loads(base64.b64decode(image.text["chara"]))
    assert v3["spec"] == "chara_card_v3"
    assert v2["spec"] == "chara_card_v2"
    assert v2["data"]["name"] == "Mira"
    assert "nickname" not in v2["data"]  # V3-only fields stay out of the V2 copy
    assert v2["data"]["vendor_data_field"] == {"nested": ["a", 1, None]}


def test_rewriting_a_png_card_replaces_the_old_chunks(tmp_path):
    first = tmp_path / "a.png"
    write_png_card(load_card(json_card(tmp_path / "a.json", v2_card("First"))), picture(), first)
    card = load_card(first).model_copy(update={"name": "Second"})
    second = tmp_path / "b.png"
    write_png_card(card, first.read_bytes(), second)
    with Image.open(second) as image:
        assert isinstance(image, PngImageFile)
        chunks = [k for k, _ in image.text.items()]
    assert chunks.count("chara") == 1
    assert load_card(second).name == "Second"


def test_png_card_from_a_jpeg_picture(tmp_path):
    card = load_card(json_card(tmp_path / "a.json", v2_card("Jay")))
    write_png_card(card, picture("JPEG"), tmp_path / "jay.png")
    assert load_card(tmp_path / "jay.png").name == "Jay"


def test_png_card_needs_a_picture(tmp_path):
    card = load_card(json_card(tmp_path / "a.json", v2_card("Jay")))
    with pytest.raises(CardError, match="needs a picture"):
        write_png_card(card, None, tmp_path / "jay.png")


def test_charx_round_trip_keeps_fields_and_picture(tmp_path):
    original = load_card(json_card(tmp_path / "mira.json", _rich_v3()))
    icon = picture("PNG", "gold")
    out = tmp_path / "mira.charx"
    write_charx(original, out, icon)
    again = load_card(out)
    assert again.image is not None
    assert again.image.data == icon
    expected = original.to_json_dict()
    got = again.to_json_dict()
    # The picture is now embedded, so the icon descriptor points into the archive.
    assert got["data"].pop("assets") == [
        {
            "type": "icon",
            "uri": "embeded://assets/icon/image/main.png",
            "name": "main",
            "ext": "png",
        }
    ]
    expected["data"].pop("assets")
    assert got == expected
    with zipfile.ZipFile(out) as archive:
        assert set(archive.namelist()) == {"card.json", "assets/icon/image/main.png"}


def test_charx_rewrite_keeps_its_own_picture_and_extra_files(tmp_path):
    obj = v3_card(
        "Sol",
        assets=[
            {"type": "icon", "uri": "embeded://i/main.webp", "name": "main", "ext": "webp"},
            {"type": "emotion", "uri": "embeded://e/joy.png", "name": "joy", "ext": "png"},
            {"type": "emotion", "uri": "embeded://e/sad.png", "name": "sad", "ext": "png"},
        ],
    )
    path = tmp_path / "sol.charx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("card.json", json.dumps(obj))
        archive.writestr("i/main.webp", picture("WEBP"))
    card = load_card(path)
    out = tmp_path / "copy.charx"
    write_charx(card, out, extra_files={"e/joy.png": picture()})
    again = load_card(out)
    assert again.image is not None
    assert again.image.mime == "image/webp"
    names = [a.name for a in again.assets]
    assert names == ["main", "joy"]  # "sad" had no file, so it is not referenced


def test_v1_card_is_written_as_v2(tmp_path):
    card = load_card(json_card(tmp_path / "old.json", {"name": "Bram", "odd_field": 1}))
    out = tmp_path / "new.json"
    write_json_card(card, out)
    written = json.loads(out.read_text())
    assert written["spec"] == "chara_card_v2"
    assert written["odd_field"] == 1
    again = load_card(out)
    assert again.spec is SpecVersion.V2
    assert again.name == "Bram"


def test_unicode_text_survives_png(tmp_path):
    card = load_card(json_card(tmp_path / "a.json", v3_card("林晚舟", first_mes="“哟，生面孔。”")))
    write_png_card(card, picture(), tmp_path / "lin.png")
    again = load_card(tmp_path / "lin.png")
    assert (again.name, again.first_mes) == ("林晚舟", "“哟，生面孔。”")


def test_written_png_decodes_as_an_image(tmp_path):
    card = load_card(json_card(tmp_path / "a.json", v2_card()))
    write_png_card(card, picture(size=(64, 64)), tmp_path / "a.png")
    image = Image.open(io.BytesIO((tmp_path / "a.png").read_bytes()))
    image.load()
    assert image.size == (64, 64)
