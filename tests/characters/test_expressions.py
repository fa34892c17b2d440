"""Character expressions: read from CHARX, PNG and JSON cards; chosen by the reply's words."""

from __future__ import annotations

import base64
from pathlib import Path

from kotonia_tui.characters import load_card
from kotonia_tui.characters.card import CardImage
from kotonia_tui.characters.expressions import Expression, expression_for, load_expressions

from .builders import b64_json, charx_card, json_card, picture, png_with_text, v3_card


def _asset(name: str, uri: str, kind: str = "emotion") -> dict[str, str]:
    return {"type": kind, "uri": uri, "name": name, "ext": "png"}


def test_charx_expressions_are_read_from_the_archive(tmp_path: Path) -> None:
    joy, angry = picture(color="yellow"), picture(color="red")
    card = v3_card(
        assets=[
            {"type": "icon", "uri": "ccdefault:", "name": "main", "ext": "png"},
            _asset("joy", "embeded://assets/emotion/joy.png"),
            _asset("angry", "embedded://assets/emotion/angry.png", kind="Expression"),
            _asset("sad", "embeded://assets/emotion/missing.png"),
            _asset("web", "https://example.com/x.png"),
            {"type": "background", "uri": "embeded://bg.png", "name": "bg", "ext": "png"},
        ]
    )
    path = charx_card(
        tmp_path / "mira.charx",
        card,
        {"assets/emotion/joy.png": joy, "assets/emotion/angry.png": angry, "bg.png": joy},
    )
    expressions, problems = load_expressions(load_card(path))
    assert [(e.name, e.image.data) for e in expressions] == [("joy", joy), ("angry", angry)]
    assert problems == [
        f"{path}: expression 'sad': assets/emotion/missing.png is not in the CHARX archive",
        f"{path}: expression 'web': a web address (pictures are not downloaded)",
    ]


def test_png_chunks_data_uris_and_the_default_picture(tmp_path: Path) -> None:
    blush = picture(color="pink")
    assets = [
        _asset("blush", "__asset:blush"),
        _asset("calm", "data:image/png;base64," + base64.b64encode(picture("JPEG")).decode()),
        _asset("neutral", "ccdefault:"),
        _asset("text", "data:text/plain;base64," + base64.b64encode(b"hello").decode()),
    ]
    png = png_with_text(
        {
            "ccv3": b64_json(v3_card(assets=assets)),
            "chara-ext-asset_:blush": base64.b64encode(blush).decode(),
        }
    )
    path = tmp_path / "mira.png"
    path.write_bytes(png)
    expressions, problems = load_expressions(load_card(path))
    by_name = {e.name: e.image for e in expressions}
    assert by_name["blush"].data == blush
    assert by_name["calm"].mime == "image/jpeg"
    assert by_name["neutral"].data == png  # the card's own picture
    assert problems == [f"{path}: expression 'text': not a PNG, JPEG, WebP or GIF picture"]
    plain = json_card(tmp_path / "plain.json", v3_card())
    assert load_expressions(load_card(plain)) == ([], [])


def _expressions(*names: str) -> list[Expression]:
    return [Expression(n, CardImage(data=b"", mime="image/png")) for n in names]


def test_the_mood_word_closest_to_the_end_of_the_reply_chooses() -> None:
    cards = _expressions("Joy", "sad", "angry", "neutral", "sleepy")

    def chosen(text: str) -> tuple[str | None, str]:
        found = expression_for(text, cards)
        return (found.expression.name if found.expression else None, found.word)

    assert chosen("*She smiles at you.*") == ("Joy", "smiles")
    assert chosen("She smiles, then glares at the door.") == ("angry", "glares")
    assert chosen("Tears fill her eyes, but she laughs.") == ("Joy", "laughs")
    assert chosen("He is sleepy.") == ("sleepy", "sleepy")  # an expression's own name
    assert chosen("彼女は静かに笑った。") == ("Joy", "笑")
    assert chosen("他哭了。") == ("sad", "哭")
    assert chosen("A smiley face on the wall.") == ("neutral", "")  # whole words only
    assert chosen("") == ("neutral", "")
    assert expression_for("She smiles.", _expressions("angry")).expression is None
