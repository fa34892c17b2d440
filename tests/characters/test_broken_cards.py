"""A broken card gives one clear line naming the file and the problem; the others still load."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from kotonia_tui.characters import CardError, CardShadowed, load_card, load_cards

from .builders import (
    b64_json,
    charx_card,
    json_card,
    picture,
    png_card,
    png_with_text,
    tavernai_comment,
    v2_card,
    webp_with_comment,
)


def _not_a_png(folder: Path) -> Path:
    path = folder / "notes.png"
    path.write_text("just some text, not a picture")
    return path


def _jpeg_named_png(folder: Path) -> Path:
    path = folder / "photo.png"
    path.write_bytes(picture("JPEG"))
    return path


def _truncated_png(folder: Path) -> Path:
    data = png_with_text({"chara": b64_json(v2_card("Cut"))})
    path = folder / "cut.png"
    path.write_bytes(data[: len(data) - 30])
    return path


def _png_without_card(folder: Path) -> Path:
    path = folder / "plain.png"
    path.write_bytes(picture())
    return path


def _bad_base64(folder: Path) -> Path:
    path = folder / "wren.png"
    path.write_bytes(png_with_text({"chara": "this is *not* base64!"}))
    return path


def _bad_json_in_png(folder: Path) -> Path:
    import base64

    path = folder / "wren.png"
    path.write_bytes(png_with_text({"chara": base64.b64encode(b"{not json").decode()}))
    return path


def _invalid_json(folder: Path) -> Path:
    path = folder / "bad.json"
    path.write_text('{"spec": "chara_card_v2", "data": {"name": "X",}}')
    return path


def _missing_name(folder: Path) -> Path:
    obj = v2_card()
    del obj["data"]["name"]
    return json_card(folder / "bad.json", obj)


def _greetings_not_a_list(folder: Path) -> Path:
    return json_card(folder / "x.json", v2_card(alternate_greetings=3))


def _greeting_not_a_string(folder: Path) -> Path:
    return json_card(folder / "x.json", v2_card(alternate_greetings=["hi", 5]))


def _description_not_a_string(folder: Path) -> Path:
    return json_card(folder / "x.json", v2_card(description=["a", "b"]))


def _top_level_list(folder: Path) -> Path:
    return json_card(folder / "list.json", [1, 2])


def _unknown_spec(folder: Path) -> Path:
    return json_card(folder / "v9.json", {"spec": "chara_card_v9", "data": {"name": "Z"}})


def _lore_keys_wrong(folder: Path) -> Path:
    book = {"entries": [{"keys": ["ok"], "content": "a"}, {"keys": "sea", "content": "b"}]}
    return json_card(folder / "lore.json", v2_card(character_book=book))


def _bad_regex(folder: Path) -> Path:
    book = {"entries": [{"keys": ["(unclosed"], "content": "x", "use_regex": True}]}
    return json_card(folder / "rx.json", v2_card(character_book=book))


def _charx_without_card_json(folder: Path) -> Path:
    path = folder / "empty.charx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hello")
    return path


def _charx_not_a_zip(folder: Path) -> Path:
    path = folder / "junk.charx"
    path.write_bytes(b"PK\x03\x04 definitely not a zip")
    return path


def _charx_bad_field(folder: Path) -> Path:
    return charx_card(folder / "c.charx", v2_card(tags="a,b"))


def _webp_without_card(folder: Path) -> Path:
    path = folder / "moon.webp"
    path.write_bytes(webp_with_comment(None))
    return path


def _webp_with_other_comment(folder: Path) -> Path:
    path = folder / "gen.webp"
    path.write_bytes(webp_with_comment(b"ASCII\0\0\0Steps: 20, Sampler: Euler a"))
    return path


def _png_named_webp(folder: Path) -> Path:
    path = folder / "pic.webp"
    path.write_bytes(picture())
    return path


def _webp_with_numbers_past_a_byte(folder: Path) -> Path:
    path = folder / "nums.webp"
    path.write_bytes(webp_with_comment(b"ASCII\0\0\0123,34,256,125"))
    return path


def _webp_with_a_trailing_comma(folder: Path) -> Path:
    path = folder / "comma.webp"
    path.write_bytes(webp_with_comment(tavernai_comment({"name": "C"}) + b","))
    return path


def _truncated_webp(folder: Path) -> Path:
    data = webp_with_comment(tavernai_comment(v2_card("Cut")))
    path = folder / "cut.webp"
    path.write_bytes(data[: len(data) - 30])
    return path


def _bad_json_in_webp(folder: Path) -> Path:
    path = folder / "wren.webp"
    path.write_bytes(webp_with_comment(b'ASCII\0\0\0{"name": "Wren",}'))
    return path


def _bad_field_in_webp(folder: Path) -> Path:
    path = folder / "wren.webp"
    path.write_bytes(webp_with_comment(tavernai_comment(v2_card(tags="a,b"))))
    return path


NO_CARD_IN_WEBP = (
    "a WebP picture with no card data (no card JSON in its EXIF UserComment, where TavernAI kept "
    "it): save the card as PNG or JSON, or put its .json beside it"
)

CASES: list[tuple[Callable[[Path], Path], list[str]]] = [
    (_not_a_png, ["notes.png:", "not a PNG"]),
    (_jpeg_named_png, ["photo.png:", "not a PNG", "image/jpeg"]),
    (_truncated_png, ["cut.png:", "truncated PNG"]),
    (_png_without_card, ["plain.png:", "no character card", "ccv3", "chara"]),
    (_bad_base64, ["wren.png: tEXt chunk 'chara' is not valid base64"]),
    (_bad_json_in_png, ["wren.png:", "tEXt chunk 'chara'", "not valid JSON"]),
    (_invalid_json, ["bad.json:", "not valid JSON", "line 1"]),
    (_missing_name, ["bad.json: data.name: missing"]),
    (
        _greetings_not_a_list,
        ["x.json: data.alternate_greetings: expected a list of strings, got int"],
    ),
    (_greeting_not_a_string, ["x.json: data.alternate_greetings[1]: expected a string, got int"]),
    (_description_not_a_string, ["x.json: data.description: expected a string, got list"]),
    (_top_level_list, ["list.json:", "expected a JSON object", "got list"]),
    (_unknown_spec, ["v9.json: spec:", "chara_card_v9"]),
    (_lore_keys_wrong, ["lore.json: data.character_book.entries[1].keys: expected a list"]),
    (_bad_regex, ["rx.json: data.character_book.entries[0].keys[0]:", "regular expression"]),
    (_charx_without_card_json, ["empty.charx:", "card.json is missing"]),
    (_charx_not_a_zip, ["junk.charx:", "zip"]),
    (_charx_bad_field, ["c.charx: data.tags: expected a list of strings, got string"]),
    (_webp_without_card, [f"moon.webp: {NO_CARD_IN_WEBP}"]),
    (_webp_with_other_comment, [f"gen.webp: {NO_CARD_IN_WEBP}"]),
    (_webp_with_numbers_past_a_byte, [f"nums.webp: {NO_CARD_IN_WEBP}"]),
    (_webp_with_a_trailing_comma, [f"comma.webp: {NO_CARD_IN_WEBP}"]),
    (_png_named_webp, ["pic.webp: not a WebP file (it is image/png)"]),
    (_truncated_webp, ["cut.webp:", "truncated WebP"]),
    (_bad_json_in_webp, ["wren.webp: EXIF UserComment:", "not valid JSON"]),
    (
        _bad_field_in_webp,
        ["wren.webp: data.tags: expected a list of strings, got string (in the EXIF UserComment)"],
    ),
]


@pytest.mark.parametrize(("make", "expected"), CASES, ids=[make.__name__ for make, _ in CASES])
def test_broken_card_gives_one_line_naming_file_and_field(tmp_path, make, expected):
    path = make(tmp_path)
    with pytest.raises(CardError) as caught:
        load_card(path)
    message = str(caught.value)
    assert "\n" not in message
    for fragment in expected:
        assert fragment in message


@pytest.mark.parametrize(("make", "expected"), CASES, ids=[make.__name__ for make, _ in CASES])
def test_broken_card_does_not_stop_the_folder(tmp_path, make, expected):
    make(tmp_path)
    png_card(tmp_path / "good-png.png", chara=v2_card("Good Png"))
    json_card(tmp_path / "good-json.json", v2_card("Good Json"))
    cards, problems = load_cards([tmp_path])
    assert [c.name for c in cards] == ["Good Json", "Good Png"]
    assert len(problems) == 1
    assert str(problems[0]).startswith(expected[0].split(":")[0])


def test_unreadable_suffix_is_an_error(tmp_path):
    path = tmp_path / "card.txt"
    path.write_text("{}")
    with pytest.raises(CardError, match=r"^card\.txt: not a card file"):
        load_card(path)


def test_missing_file_is_a_card_error(tmp_path):
    with pytest.raises(CardError, match=r"^gone\.json: cannot be read"):
        load_card(tmp_path / "gone.json")


def test_later_folder_wins_and_the_override_is_noted(tmp_path):
    shipped, user = tmp_path / "shipped", tmp_path / "user"
    shipped.mkdir()
    user.mkdir()
    png_card(shipped / "wren.png", chara=v2_card("Wren (shipped)"))
    json_card(shipped / "ana.json", v2_card("Ana"))
    json_card(user / "wren.json", v2_card("Wren (mine)"))
    cards, problems = load_cards([shipped, user])
    assert [(c.key, c.name) for c in cards] == [("ana", "Ana"), ("wren", "Wren (mine)")]
    assert len(problems) == 1
    assert isinstance(problems[0], CardShadowed)
    assert str(problems[0]).startswith("wren.png: key 'wren' is overridden by")


def test_picture_beside_a_json_card_is_not_a_second_card(tmp_path):
    json_card(tmp_path / "ana.json", v2_card("Ana"))
    (tmp_path / "ana.png").write_bytes(picture())
    cards, problems = load_cards([tmp_path])
    assert [c.key for c in cards] == ["ana"]
    assert problems == []
    assert cards[0].image is not None


def test_a_webp_beside_a_card_is_its_picture_and_other_pictures_are_passed_over(tmp_path):
    """A .webp card is listed; a .webp beside a card of its stem is that card's picture (no
    second card, no complaint); a lone .webp with no card in it is said to be one, with what
    to do; a .jpg or .gif, never a card file, is passed over in silence."""
    (tmp_path / "ren.webp").write_bytes(webp_with_comment(tavernai_comment(v2_card("Ren"))))
    json_card(tmp_path / "ana.json", v2_card("Ana"))
    (tmp_path / "ana.webp").write_bytes(webp_with_comment(None))
    png_card(tmp_path / "bo.png", chara=v2_card("Bo"))
    (tmp_path / "bo.webp").write_bytes(webp_with_comment(None))
    (tmp_path / "moon.webp").write_bytes(webp_with_comment(None))
    (tmp_path / "photo.jpg").write_bytes(picture("JPEG"))
    (tmp_path / "wave.gif").write_bytes(picture("GIF"))
    cards, problems = load_cards([tmp_path])
    assert [(c.key, c.image.mime if c.image else None) for c in cards] == [
        ("ana", "image/webp"),
        ("bo", "image/png"),
        ("ren", "image/webp"),
    ]
    assert [str(p) for p in problems] == [f"moon.webp: {NO_CARD_IN_WEBP}"]


def test_same_key_twice_in_one_folder_keeps_one_and_notes_the_other(tmp_path):
    json_card(tmp_path / "ana.json", v2_card("Ana"))
    charx_card(tmp_path / "ana.charx", v2_card("Ana (charx)"))
    cards, problems = load_cards([tmp_path])
    assert len(cards) == 1
    assert len(problems) == 1
    assert isinstance(problems[0], CardShadowed)


def test_cards_are_sorted_by_name_and_missing_folders_are_skipped(tmp_path):
    json_card(tmp_path / "z.json", v2_card("alma"))
    json_card(tmp_path / "a.json", v2_card("Zed"))
    json_card(tmp_path / "m.json", v2_card("Bea"))
    (tmp_path / "notes.txt").write_text("not a card")
    (tmp_path / ".hidden.json").write_text("{")
    cards, problems = load_cards([tmp_path / "does-not-exist", tmp_path])
    assert [c.name for c in cards] == ["alma", "Bea", "Zed"]
    assert problems == []


def test_error_names_file_not_a_parser_dump(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CardError) as caught:
        load_card(path)
    assert str(caught.value).startswith("deep.json: ")
    assert len(str(caught.value)) < 200


def test_null_optional_fields_are_treated_as_unset(tmp_path):
    obj = v2_card("Nia", character_book=None, alternate_greetings=None, creator_notes=None)
    card = load_card(json_card(tmp_path / "nia.json", obj))
    assert card.character_book is None
    assert card.alternate_greetings == []
    assert card.creator_notes == ""
    assert json.loads((tmp_path / "nia.json").read_text())["data"]["creator_notes"] is None
