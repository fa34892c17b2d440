"""Every card format loads into the same CharacterCard."""

from __future__ import annotations

import hashlib
import json
import tracemalloc

from kotonia_tui.characters import SpecVersion, load_card

from .builders import (
    b64_json,
    charx_card,
    json_card,
    picture,
    png_card,
    png_chunk,
    png_with_text,
    tavernai_comment,
    v2_card,
    v3_card,
    webp_with_comment,
)


def test_v1_flat_json_loads(tmp_path):
    path = json_card(
        tmp_path / "old.json",
        {
            "name": "Bram",
            "description": "A ferryman.",
            "personality": "gruff",
            "scenario": "the river",
            "first_mes": "Fare, please.",
            "mes_example": "<START>\n{{char}}: Two coins.",
        },
    )
    card = load_card(path)
    assert card.spec is SpecVersion.V1
    assert (card.name, card.description, card.personality) == ("Bram", "A ferryman.", "gruff")
    assert card.scenario == "the river"
    assert card.first_mes == "Fare, please."
    assert card.mes_example.startswith("<START>")


def test_pre_v1_field_names_are_understood(tmp_path):
    path = json_card(
        tmp_path / "pyg.json",
        {"char_name": "Ivo", "char_persona": "A baker.", "char_greeting": "Bread?"},
    )
    card = load_card(path)
    assert (card.name, card.description, card.first_mes) == ("Ivo", "A baker.", "Bread?")


def test_v2_json_loads_all_fields(tmp_path):
    obj = v2_card(
        "Mira",
        alternate_greetings=["Oh, it's you."],
        system_prompt="Be Mira.",
        post_history_instructions="Stay brief.",
        creator_notes="for humans",
        tags=["sea"],
        creator="someone",
        character_version="3",
        extensions={"talkativeness": "0.5"},
    )
    path = json_card(tmp_path / "mira.json", obj)
    card = load_card(path)
    assert card.spec is SpecVersion.V2
    assert card.key == "mira"
    assert card.alternate_greetings == ["Oh, it's you."]
    assert card.system_prompt == "Be Mira."
    assert card.post_history_instructions == "Stay brief."
    assert card.tags == ["sea"]
    assert card.extensions == {"talkativeness": "0.5"}
    assert card.source_path == path
    assert card.card_hash == hashlib.sha256(path.read_bytes()).hexdigest()
    assert card.image is None
    assert card.raw_json == obj


def test_v3_json_loads_v3_fields(tmp_path):
    obj = v3_card(
        "Mira Okonkwo",
        nickname="Mira",
        group_only_greetings=["Everyone, welcome."],
        assets=[{"type": "icon", "uri": "ccdefault:", "name": "main", "ext": "png"}],
    )
    card = load_card(json_card(tmp_path / "mira.json", obj))
    assert card.spec is SpecVersion.V3
    assert card.nickname == "Mira"
    assert card.display_name == "Mira"
    assert card.group_only_greetings == ["Everyone, welcome."]
    assert card.assets[0].uri == "ccdefault:"


def test_numeric_character_version_is_accepted(tmp_path):
    card = load_card(json_card(tmp_path / "a.json", v2_card(character_version=2)))
    assert card.character_version == "2"


def test_png_with_chara_chunk_only(tmp_path):
    path = png_card(tmp_path / "wren.png", chara=v2_card("Wren"))
    card = load_card(path)
    assert (card.name, card.spec, card.key) == ("Wren", SpecVersion.V2, "wren")
    assert card.image is not None
    assert card.image.mime == "image/png"
    assert card.image.data == path.read_bytes()


def test_png_with_ccv3_chunk_only(tmp_path):
    card = load_card(png_card(tmp_path / "wren.png", ccv3=v3_card("Wren")))
    assert (card.name, card.spec) == ("Wren", SpecVersion.V3)


def test_png_with_both_chunks_prefers_ccv3(tmp_path):
    path = png_card(tmp_path / "wren.png", chara=v2_card("Old Wren"), ccv3=v3_card("New Wren"))
    card = load_card(path)
    assert card.name == "New Wren"
    assert card.spec is SpecVersion.V3


def test_png_card_in_an_itxt_chunk(tmp_path):
    # Some editors write iTXt; build one by hand right after IHDR.
    base = picture()
    payload = b"chara\0\0\0\0\0" + b64_json(v2_card("Ida")).encode("ascii")
    ihdr_end = 8 + 25
    data = base[:ihdr_end] + png_chunk(b"iTXt", payload) + base[ihdr_end:]
    path = tmp_path / "ida.png"
    path.write_bytes(data)
    assert load_card(path).name == "Ida"


def test_charx_uses_the_main_icon_as_picture(tmp_path):
    icon = picture("PNG", "orange")
    other = picture("PNG", "blue")
    obj = v3_card(
        "Sol",
        assets=[
            {"type": "background", "uri": "embeded://assets/bg.png", "name": "main", "ext": "png"},
            {"type": "icon", "uri": "embeded://assets/icon/x.png", "name": "second", "ext": "png"},
            {"type": "icon", "uri": "embeded://assets/icon/main.png", "name": "main", "ext": "png"},
        ],
    )
    files = {"assets/icon/main.png": icon, "assets/icon/x.png": other, "assets/bg.png": other}
    card = load_card(charx_card(tmp_path / "sol.charx", obj, files))
    assert card.name == "Sol"
    assert card.key == "sol"
    assert card.image is not None
    assert card.image.data == icon


def test_charx_accepts_the_embedded_spelling_and_jpeg(tmp_path):
    icon = picture("JPEG")
    obj = v3_card(
        "Sol", assets=[{"type": "icon", "uri": "embedded://a/i.jpg", "name": "main", "ext": "jpg"}]
    )
    card = load_card(charx_card(tmp_path / "sol.charx", obj, {"a/i.jpg": icon}))
    assert card.image is not None
    assert card.image.mime == "image/jpeg"


def test_charx_without_icon_has_no_picture(tmp_path):
    card = load_card(charx_card(tmp_path / "sol.charx", v3_card("Sol")))
    assert card.image is None


def test_json_card_uses_a_sibling_picture(tmp_path):
    for suffix, fmt, mime in ((".png", "PNG", "image/png"), (".webp", "WEBP", "image/webp")):
        folder = tmp_path / suffix.strip(".")
        folder.mkdir()
        json_card(folder / "ana.json", v2_card("Ana"))
        (folder / f"ana{suffix}").write_bytes(picture(fmt))
        card = load_card(folder / "ana.json")
        assert card.image is not None
        assert card.image.mime == mime
    json_card(tmp_path / "jo.json", v2_card("Jo"))
    (tmp_path / "jo.jpg").write_bytes(picture("JPEG"))
    assert load_card(tmp_path / "jo.json").image.mime == "image/jpeg"


def test_webp_card_as_tavernai_wrote_it(tmp_path):
    """TavernAI's .webp card: the JSON's UTF-8 bytes as comma-separated numbers in the EXIF
    UserComment; the picture is the card's picture."""
    path = tmp_path / "ren.webp"
    path.write_bytes(webp_with_comment(tavernai_comment(v2_card("Ren 蓮", description="é"))))
    card = load_card(path)
    assert (card.key, card.name, card.description, card.spec) == (
        "ren",
        "Ren 蓮",
        "é",
        SpecVersion.V2,
    )
    assert card.image is not None
    assert card.image.mime == "image/webp"
    assert card.image.data == path.read_bytes()


def test_webp_card_with_plain_json_in_the_exif_ifd_or_utf16(tmp_path):
    plain = json.dumps({"name": "Vi", "description": "a V1 card"}).encode()
    (tmp_path / "vi.webp").write_bytes(webp_with_comment(b"\0" * 8 + plain, in_exif_ifd=True))
    assert load_card(tmp_path / "vi.webp").name == "Vi"
    utf16 = b"UNICODE\0" + json.dumps(v2_card("Uma")).encode("utf-16-be")
    (tmp_path / "uma.webp").write_bytes(webp_with_comment(utf16))
    assert load_card(tmp_path / "uma.webp").name == "Uma"


def test_webp_card_in_big_endian_exif_with_utf16_in_either_order(tmp_path):
    """A big-endian (Motorola) EXIF; its UNICODE comment in its order, or little-endian as some
    writers keep it whatever the EXIF's order (the JSON's first character tells which)."""
    text = json.dumps(v2_card("Ida", description="é 蓮"))
    for name, comment in [
        ("ascii", tavernai_comment(json.loads(text))),
        ("be", b"UNICODE\0" + text.encode("utf-16-be")),
        ("le", b"UNICODE\0" + text.encode("utf-16-le")),
    ]:
        path = tmp_path / f"{name}.webp"
        path.write_bytes(webp_with_comment(comment, big_endian=True))
        assert path.read_bytes()[:4] == b"RIFF" and b"MM\0*" in path.read_bytes()
        card = load_card(path)
        assert (card.name, card.description) == ("Ida", "é 蓮"), name


def test_a_long_tavernai_comment_is_read_in_bounded_memory(tmp_path):
    """TavernAI writes each byte of the JSON as a number: a long card is a comment of
    megabytes. It is read a slice at a time, without a copy per number of the whole (a
    backtracking pattern over it took about 140 bytes per number, gigabytes for a large file)."""
    long = "a" * 190_000
    fields = ("description", "personality", "scenario", "first_mes", "mes_example")
    path = tmp_path / "long.webp"
    path.write_bytes(
        webp_with_comment(tavernai_comment(v2_card("Lo", **dict.fromkeys(fields, long))))
    )
    assert path.stat().st_size > 2_500_000
    tracemalloc.start()
    try:
        card = load_card(path)
        _size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [len(getattr(card, field)) for field in fields] == [190_000] * 5
    assert peak < 48 * 2**20


def test_json_with_bom_loads(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(v2_card("Bo")).encode())
    assert load_card(path).name == "Bo"


def test_png_text_chunk_written_by_pillow_with_other_chunks(tmp_path):
    data = png_with_text({"Comment": "hello", "chara": b64_json(v2_card("Cy"))})
    path = tmp_path / "cy.png"
    path.write_bytes(data)
    assert load_card(path).name == "Cy"
